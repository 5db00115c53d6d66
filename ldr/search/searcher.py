"""One search over shards pinned to one point in time: an unsharded index is the 1-shard case,
a sharded index N local shards, `ldr serve --ray` N remote ones.

A search is a sequence of values (Elasticsearch's query-then-fetch): the filters' masks, the plan
(compiled without I/O or a model), the query encoded once (BM25 with the statistics of every
shard summed), each shard's first-stage Candidates, one gathered Candidates, the coordinator's
stages over it, then the texts and metadata of the final hits only. Every value is read from the
one `Snapshot` the search took when it started: a refresh or a writer's commit meanwhile changes
nothing it returns.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from .gather import ShardMap, ShardedSource, gather
from .hits import SearchResult, origin, to_hits
from .options import QueryOptions


@dataclass
class Snapshot:
    """A point in time: the generation every answer names, the settings every shard shares (the
    first shard's manifest), the shards (each pinned to its generation) and their numbering."""
    generation: int
    manifest: dict
    shards: list                     # LocalShard-like: .store, .retriever(kind), .mask(conds, check), .first(...)
    map: ShardMap
    _fields: set | None = field(default=None, repr=False)

    def __len__(self) -> int:
        return sum(len(s.store) for s in self.shards)

    def fields(self) -> set:
        """The metadata fields of every shard's documents (a filter on one some shards lack is valid)."""
        if self._fields is None:
            self._fields = set().union(*(s.store.meta_fields() for s in self.shards)) if self.shards else set()
        return self._fields

    def masks(self, filters) -> list | None:
        """Each shard's filter mask (None: no filter)."""
        from . import filters as _filters

        conds = _filters.normalise(filters)
        if not conds:
            return None
        if len(self.shards) == 1:
            return [self.shards[0].mask(conds, True)]
        _filters.check_fields(conds, self.fields())
        return [s.mask(conds, False) for s in self.shards]

    def n_docs(self, masks) -> int:
        if masks is None:
            return len(self)
        return sum(int(m.sum()) for m in masks)


def compile_for(snap: Snapshot, query: str, request: QueryOptions, masks, device, spec) -> Any:
    """The plan of `request` on this point in time; `spec(opts, kinds)`: the second stage as a
    RerankerSpec (a value: nothing is loaded)."""
    from ..language_defaults import of_manifest
    from .passages import term_kind
    from .plan import compile_plan

    components = snap.manifest["components"]
    return compile_plan(query, request, snap.manifest.get("search", {}), components, max(snap.n_docs(masks), 1),
                        device=device, filtered=masks is not None, reranker=spec,
                        term_kind=lambda: term_kind(components), profile=of_manifest(snap.manifest))


def encode(snap: Snapshot, query: str, kinds, reps: dict | None = None) -> dict:
    """The query encoded once per kind (`reps`: already encoded, a batch's); a kind that scores
    with collection statistics (BM25) gets every shard's summed when there are several."""
    out = dict(reps or {})
    for kind in kinds:
        first = snap.shards[0].retriever(kind)
        rep = out[kind] if kind in out else first.encode(query)
        if len(snap.shards) > 1 and hasattr(first, "collection_stats"):
            rep = first.with_collection_stats(rep, [s.retriever(kind).collection_stats(rep) for s in snap.shards])
        out[kind] = rep
    return out


@dataclass
class Run:
    """How one search runs: where the first stages go (`first(plan_first, reps, masks, filters)` →
    each shard's Candidates, None where a shard did not answer), the passage finder's factory and the
    second stage's binder (both given the snapshot's per-kind dispatchers)."""
    first: Callable
    finder: Callable                  # finder(weights, {kind: dispatch}) -> PassageFinder
    bind: Callable                    # bind(spec, dispatch) -> a Reranker
    device: str | None = None


def search(snap: Snapshot, query: str, request: QueryOptions, run: Run, spec, *, t0: float | None = None,
           reps: dict | None = None, masks=False) -> SearchResult:
    """`query` (prepared) answered from `snap` end to end."""
    masks = snap.masks(request.filters) if masks is False else masks
    plan = compile_for(snap, query, request, masks, run.device, spec)
    if snap.n_docs(masks) == 0:       # nothing passes the filters (or an empty index)
        (empty := SearchResult([], query, {}, None, None, plan)).generation = snap.generation
        empty.missing_shards = []
        return empty
    reps = encode(snap, query, plan.kinds, reps)
    first, rest = plan.split()
    parts = run.first(first, reps, masks, request.filters)
    missing = [i for i, p in enumerate(parts) if p is None]
    cands = gather(parts, snap.map, query, {s.kind: s.depth for s in plan.first})
    dispatch = _dispatchers(snap)
    o = plan.settings
    finder = None
    if request.passages or o.rerank_model or o.window_weight:
        finder = run.finder(o.weights, {n: dispatch(n) for n in plan.kinds})
    sources = [s.source(query, None if masks is None else masks[i], reps) for i, s in enumerate(snap.shards)]
    source = ShardedSource(query, reps, snap.map, sources, finder, lambda k: encode(snap, query, [k])[k],
                           lambda sp: run.bind(sp, dispatch))
    cands = rest.run_rest(cands, source)
    hits = fetch(snap, source, cands, request)
    second = plan.stage("reranked")
    result = SearchResult(hits, query, {n: round(1e3 * t, 2) for n, t in cands.timings.items()},
                          second.reranker.name if second else None, cands, plan,
                          round(1e3 * (time.perf_counter() - t0), 2) if t0 is not None else None)
    result.finder, result.generation, result.missing_shards = finder, snap.generation, missing
    return result


def _dispatchers(snap: Snapshot) -> Callable:
    """kind → its retriever over every shard by global document number (one shard: the retriever)."""
    from .gather import Dispatch

    cache: dict = {}

    def get(kind: str):
        if kind not in cache:
            rs = [s.retriever(kind) for s in snap.shards]
            cache[kind] = rs[0] if len(rs) == 1 else Dispatch(rs, snap.map)
        return cache[kind]
    return get


def fetch(snap: Snapshot, source: ShardedSource, cands, request: QueryOptions) -> list:
    """The final hits: ids and titles, their passages, and (asked for) texts and metadata, read
    from the shards that hold them and from no other document."""
    hits = to_hits(cands.rows, snap.map.ids, snap.map.titles)
    docnos = [h.docno for h in hits]
    source.prefetch(docnos if request.with_text else [])
    metas = {}
    if request.with_meta:
        for s, pairs in snap.map.group(docnos).items():
            got = snap.shards[s].store.doc_metas([loc for _, loc in pairs])
            metas.update({g: got[loc] for g, loc in pairs})
    for h in hits:
        h.passages = cands.passages.get(h.docno, [])
        h.text = source.text(h.docno) if request.with_text else h.text
        if request.with_meta:
            h.meta, h.origin = metas[h.docno].meta, origin(metas[h.docno])
    source.release()    # the result keeps its candidates' scores, not 50 candidates' texts
    return hits
