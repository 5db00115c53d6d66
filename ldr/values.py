"""The values a shard answers with (search/gather.py's `Shard`): frozen and typed, the same whether
they come from this process or from a Ray Serve replica (pickled). Documents are named by the
shard's own document numbers; the coordinator numbers them globally (gather.ShardMap)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ShardInfo:
    """What a shard is, asked once per point in time."""
    rows: int                              # document numbers, live and deleted
    docs: int                              # live documents
    fields: tuple[str, ...]                # its documents' metadata fields
    missing: bool = False                  # a remote shard none of whose replicas answered
    manifest: dict | None = field(default=None, compare=False, repr=False)   # a replica's settings (Ray)


@dataclass(frozen=True)
class CollectionStats:
    """A BM25 shard's statistics for one query's terms (live documents only). They add up: the
    sum over every shard is the whole index's (whole numbers, so any order gives the same sum)."""
    n: int                                 # live documents
    length: float                          # their analysed terms, summed
    df: dict                               # term → live documents holding it

    def __add__(self, other: "CollectionStats") -> "CollectionStats":
        df = dict(self.df)
        for t, v in other.df.items():
            df[t] = df.get(t, 0) + v
        return CollectionStats(self.n + other.n, self.length + other.length, df)


@dataclass(frozen=True)
class ShardStats:
    """A shard's statistics for a query: the documents its filters leave, each kind's own."""
    count: int
    stats: dict                            # kind → its statistics (CollectionStats for native BM25)


@dataclass(frozen=True)
class FirstStage:
    """A shard's first stages for one query."""
    lists: dict                            # kind → [(docno, score)], best first
    timings: dict                          # kind → seconds
    ids: dict                              # docno → id, of every listed document
    distributions: dict = field(default_factory=dict)   # kind → its scores over the shard, as sums
    bounds: dict = field(default_factory=dict)          # kind → the highest score the query can reach


@dataclass(frozen=True)
class Fetched:
    """One of a shard's documents as a search shows it: what the call asked for, and no more."""
    id: str
    title: str
    text: str | None = None                # asked: text=True
    doc: Any = None                        # the Doc with its metadata, asked: meta=True
    with_meta: bool = False                # the metadata was asked (a document may hold none)
    cuts: list | None = None               # asked: its best windows cut to sentences (start, end, ...)
    passages: list | None = None           # their texts
