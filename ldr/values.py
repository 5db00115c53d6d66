"""The values a shard answers with (search/gather.py's `Shard`): frozen and typed, the same whether
they come from this process or from a Ray Serve replica (pickled). Documents are named by the
shard's own document numbers; the coordinator numbers them globally (gather.ShardMap)."""
from __future__ import annotations

import functools
import operator
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ShardInfo:
    """What a shard is, asked once per point in time."""
    rows: int                              # document numbers, live and deleted
    docs: int                              # live documents
    fields: tuple[str, ...]                # its documents' metadata fields
    totals: dict = field(default_factory=dict)   # kind with collection statistics → (live documents, their length)
    missing: bool = False                  # a remote shard none of whose replicas answered
    # a learned-sparse kind → the terms its documents hold, one bit a term id (np.packbits)
    vocabularies: dict = field(default_factory=dict, compare=False, repr=False)
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

    @staticmethod
    def total(parts: list) -> "CollectionStats":
        """The sum of shards' statistics of one query: where every shard lists the same terms in the
        same order (each lists the query's terms), each term's frequencies are added in one pass."""
        first = parts[0]
        terms = tuple(first.df)
        if len(parts) == 1 or any(tuple(p.df) != terms for p in parts[1:]):
            return functools.reduce(operator.add, parts)
        return CollectionStats(sum(p.n for p in parts), sum(p.length for p in parts),
                               dict(zip(terms, map(sum, zip(*(p.df.values() for p in parts))))))


@dataclass(frozen=True)
class ShardStats:
    """A shard's statistics for a query: the documents its filters leave, each kind's own."""
    count: int
    stats: dict                            # kind → its statistics (CollectionStats for native BM25)


@dataclass(frozen=True)
class TermEvidence:
    """A native BM25 shard's list ranked before the whole index's document frequencies were known
    (components/bm25_store/native_evidence.py): what scores its documents exactly once they are."""
    terms: tuple                           # the query's analysed terms, in the query's order
    qtf: tuple                             # each one's count in the query
    df: tuple                              # live documents here holding each
    docs: Any                              # the listed docnos (int64), in list order
    cells: tuple                           # (row in docs, term column, tf) of each term a listed document holds
    lengths: Any                           # the listed documents' analysed lengths (float32)
    ranked: Any                            # the weight each term was ranked with here
    last: float                            # the list's last score (0.0: it holds every document it could)
    n: int                                 # live documents here
    k1: float
    b: float
    sums: Any = None                       # the score distribution's parts, when asked: Σ_d p_t(d)
    cross: Any = None                      # Σ_d p_t(d)·p_u(d)
    head: Any = None                       # the best documents whatever a filter allows (the max)
    head_cells: tuple | None = None
    head_lengths: Any = None
    head_beyond: float = 0.0               # the score after them as ranked here


@dataclass(frozen=True)
class FirstStage:
    """A shard's first stages for one query."""
    lists: dict                            # kind → [(docno, score)], best first
    timings: dict                          # kind → seconds
    ids: dict                              # docno → id, of every listed document
    distributions: dict = field(default_factory=dict)   # kind → its scores over the shard, as sums
    bounds: dict = field(default_factory=dict)          # kind → the highest score the query can reach
    count: int | None = None               # documents the filters leave here (asked with filters)
    evidence: dict = field(default_factory=dict)        # kind → TermEvidence (a list ranked before df was known)
    features: dict = field(default_factory=dict)        # docno → WindowFeatures of its likely window candidates


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


@dataclass(frozen=True)
class WindowAsk:
    """The window features a coordinator asks with the first stages: the vector kinds and terms the
    window stage reads, and how many of the documents the shard's lists fuse best (by `fuse`, the
    plan's fusion) to describe."""
    kinds: tuple
    terms: tuple
    fuse: Any
    depth: int



@dataclass(frozen=True)
class TermSet:
    """The term ids a kind's documents hold over every shard of a point in time, ascending: a
    learned-sparse query is weighed over them alone (a term no document holds scores nothing, and
    the vocabulary projection over 30k terms is most of a query's encoding). `key` names the set
    (a cached query encoding over another set is not this one's)."""
    ids: Any                               # np.ndarray of int32, ascending
    key: bytes

    @staticmethod
    def union(packed: list) -> "TermSet":
        import hashlib
        import numpy as np

        bits = np.zeros(max(len(p) for p in packed), dtype=np.uint8)
        for p in packed:
            bits[:len(p)] |= p
        return TermSet(np.flatnonzero(np.unpackbits(bits)).astype(np.int32),
                       hashlib.blake2b(np.ascontiguousarray(bits).tobytes(), digest_size=16).digest())
