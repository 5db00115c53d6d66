"""The coordinator of a sharded search: shards run a plan's first stages, this module gathers
what they return into one Candidates, and gives the rest of the plan (fusion, the window stage,
reranking, passages) a QuerySource over every shard, as if the shards were one index.

Documents are numbered globally: shard s's document d is `offsets[s] + d`. Ties in score are
broken by id over the whole index, as one index breaks them, so the gathered lists equal the
lists one index would return.
"""
from __future__ import annotations

import bisect

import numpy as np

from ..components.topk import IdOrder
from .source import FinderReads
from .stages.base import Candidates


class ShardMap:
    """Global document numbers over the shards' docstores (Segments), their ids and titles."""

    def __init__(self, stores: list):
        self.stores = stores
        self.offsets = [0]
        for s in stores:
            self.offsets.append(self.offsets[-1] + len(s.ids))
        if len(stores) == 1:       # one index: its own lists and order, nothing copied
            self.ids, self.titles, self._id_order = stores[0].ids, stores[0].titles, None
        else:
            self.ids = [i for s in stores for i in s.ids]
            self.titles = [t for s in stores for t in s.titles]
            self._id_order = IdOrder(self.ids)

    def locate(self, docno: int) -> tuple[int, int]:
        s = bisect.bisect_right(self.offsets, docno) - 1
        return s, docno - self.offsets[s]

    def group(self, docnos) -> dict[int, list[tuple[int, int]]]:
        """{shard: [(global, local)]} of `docnos`, in their order."""
        out: dict[int, list] = {}
        for d in docnos:
            s, local = self.locate(int(d))
            out.setdefault(s, []).append((int(d), local))
        return out

    @property
    def id_order(self) -> IdOrder:
        return self.stores[0].id_order if self._id_order is None else self._id_order


def gather(parts: list[Candidates | None], shards: ShardMap, query: str, depth: dict[str, int]) -> Candidates:
    """One Candidates from each shard's first stages (None: a shard that did not answer): per kind
    of the plan (`depth`), the best `depth[kind]` of every shard's list (global numbers), ordered
    by score then id; a kind's time is its slowest shard's."""
    out = Candidates(query)
    answered = [(s, c) for s, c in enumerate(parts) if c is not None]
    if len(parts) == 1 and answered:            # one index: its lists are already in this order
        c = answered[0][1]
        for kind in depth:
            out.lists[kind] = c.lists.get(kind, [])[:depth[kind]]
            out.runs[kind] = dict(out.lists[kind])
            out.timings[kind] = c.timings.get(kind, 0.0)
        return out
    rank = shards.id_order
    for kind in depth:
        rows = [(shards.offsets[s] + d, sc) for s, c in answered for d, sc in c.lists.get(kind, [])]
        rows.sort(key=lambda r: (-r[1], rank[r[0]]))
        out.lists[kind] = rows[:depth[kind]]
        out.runs[kind] = dict(out.lists[kind])
        out.timings[kind] = max((c.timings.get(kind, 0.0) for _, c in answered), default=0.0)
    return out


class Dispatch:
    """One kind's retriever over every shard, by global document number (what the passage finder
    and the second stages call); anything else is the first shard's (the same model everywhere)."""

    def __init__(self, retrievers: list, shards: ShardMap):
        self.retrievers, self.shards = retrievers, shards

    def passage_scores(self, rep, docno: int):
        s, local = self.shards.locate(docno)
        return self.retrievers[s].passage_scores(rep, local)

    def exact_scores(self, rep, docnos: list[int], first_stage: dict) -> np.ndarray:
        out = np.zeros(len(docnos), dtype=np.float64)
        at = {d: i for i, d in enumerate(docnos)}
        for s, pairs in self.shards.group(docnos).items():
            local_first = {loc: first_stage[g] for g, loc in pairs if g in first_stage}
            got = self.retrievers[s].exact_scores(rep, [loc for _, loc in pairs], local_first)
            for (g, _), v in zip(pairs, got):
                out[at[g]] = v
        return out

    def __getattr__(self, name):
        return getattr(self.retrievers[0], name)


class ShardedSource(FinderReads):
    """The QuerySource of the coordinator: texts and metadata from the shard that holds each
    document, the query encoded once (BM25 with the whole index's statistics), passages and best
    windows found among the gathered candidates as one index finds them."""

    def __init__(self, query: str, reps: dict, shards: ShardMap, sources: list, finder=None, encode=None,
                 bind=None):
        """`encode(kind)`: the query for a kind no first stage searched (a second stage's);
        `bind(spec)`: the reranker a plan's RerankerSpec names, loaded where the plan runs."""
        self.query, self.reps, self.shards, self.sources = query, reps, shards, sources
        self.finder, self.encode, self.bind = finder, encode, bind

    def reranker(self, spec):
        return self.bind(spec)

    def rep(self, kind: str):
        if kind not in self.reps:
            self.reps[kind] = self.encode(kind)
        return self.reps[kind]

    def search(self, kind: str, rep, depth: int) -> list:
        raise RuntimeError("a sharded plan's first stages run on the shards")

    def tiebreak(self):
        return self.shards.id_order

    def score_bound(self, kind: str) -> float | None:
        bound = getattr(self.sources[0].retriever(kind), "bound", None)
        return bound(self.rep(kind)) if bound is not None else None

    def prefetch(self, docnos) -> None:
        for s, pairs in self.shards.group(docnos).items():
            self.sources[s].prefetch([loc for _, loc in pairs])

    def text(self, docno: int) -> str:
        s, local = self.shards.locate(docno)
        return self.sources[s].text(local)

    def meta(self, docnos: list[int]) -> dict:
        out = {}
        for s, pairs in self.shards.group(docnos).items():
            got = self.sources[s].meta([loc for _, loc in pairs])
            out.update({g: got[loc] for g, loc in pairs})
        return out

    def _keys(self, docnos) -> dict:
        out = {}
        for s, pairs in self.shards.group(docnos).items():
            store = self.shards.stores[s]
            out.update({g: int(store.uids[loc]) * len(self.sources) + s for g, loc in pairs})
        return out

    def release(self) -> None:
        for s in self.sources:
            s.release()
