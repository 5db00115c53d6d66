"""Many queries of one request answered together (`search_many`, so `ldr search --queries`, the
BEIR, MTEB and PyTerrier adapters and `ldr tune`'s retrieval), where a plan is one first stage's
own ranking and nothing after it (a BM25 run: `--mode bm25`, no relevance, no passages). The plan
is compiled once, each shard scores the whole batch in one call (`first_many`: native BM25 sums
every query's postings in one pass) and names every listed document's id at once, and the final
hits' titles come in one fetch per shard. Each result is the one `searcher.search` gives the query
(same ids, scores, order and candidates); any other plan is searched a query at a time.
"""
from __future__ import annotations

import gc
import time
from contextlib import contextmanager
from operator import itemgetter

from .gather import CandidateOrder, ShardMap, gather
from .hits import SearchResult, origin, ranked_hits, to_hits
from .stages.base import RankedRows
from .stages.fuse import Fuse


def lone_ranking(plan) -> bool:
    """The plan is one kind's first stage ranked as it is (no fusion, no later stage)."""
    return (len(plan.first) == 1 and not plan.first[0].distribution and len(plan.rest) == 1
            and isinstance(plan.rest[0], Fuse) and not plan.rest[0].fused)


def search_batch(snap, texts: list[str], request, run, spec, reps: list[dict],
                 plans: dict | None = None) -> list[SearchResult] | None:
    """The results of `texts` (prepared queries; `reps`: each one's representations already
    encoded), or None where the request's plan is not a lone ranking (the caller then searches each
    query alone). Timings: each query is given its share of the batch's time. `plans`: kept by the
    caller from one batch to the next of a run (a plan unfiltered is compiled once a run)."""
    with _no_cycle_collection():
        return _search_batch(snap, texts, request, run, spec, reps, {} if plans is None else plans)


@contextmanager
def _no_cycle_collection():
    """A batch builds tens of thousands of small containers (a hit, its scores, its row) and no
    reference cycle. With the cycle collector on, they set off full collections over everything
    the process holds (26% of a top-1,000 run on qmsum-train); collected once at the end, they
    are still traversed (another 15%). So the collector is paused for the batch, and its objects
    join the oldest generation untraversed (gc.freeze + unfreeze moves them, unless the process
    froze objects of its own). Refcounting frees all of it as before; a cycle elsewhere is found
    by the next full collection."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            if not gc.get_freeze_count():
                gc.freeze()
                gc.unfreeze()
            gc.enable()


def _search_batch(snap, texts: list[str], request, run, spec, reps: list[dict], plans: dict) -> list[SearchResult] | None:
    from . import searcher

    t0 = time.perf_counter()
    conds = snap.conditions(request.filters)
    # without filters the plan needs no shard's answer: a plan that is not a lone ranking asks nothing
    # (the plan reads no query text but keeps it: each result's is the plan with its own query)
    plan = None if conds else plans.get("unfiltered") or plans.setdefault(
        "unfiltered", searcher.compile_for(snap, texts[0], request, len(snap), False, run.device, spec))
    if plan is not None and not lone_ranking(plan):
        return None
    if len(snap.shards) == 1 and not conds:
        count, stats, missing = len(snap), [None] * len(texts), [[] for _ in texts]
    else:
        count, stats, missing = _statistics(snap, texts, conds, run)
    if plan is None:        # filters: the plan is sized by the documents they leave
        plan = searcher.compile_for(snap, texts[0], request, count, True, run.device, spec)
    if count == 0 or not lone_ranking(plan) or any(len(m) == len(snap.shards) for m in missing):
        return None
    kind, depth = plan.first[0].kind, plan.first[0].depth
    reps = [searcher.encode(snap, q, [kind], r, st) for q, r, st in zip(texts, reps, stats)]
    first, rest = plan.split()
    fuse = rest.rest[0]
    gone = [{id(snap.shards[i]) for i in m} for m in missing]
    parts = run.each(lambda s: first_many(s, first, [r if id(s) not in g else None for r, g in zip(reps, gone)],
                                          conds or None))
    results, final = [], set()
    for j, q in enumerate(texts):
        got = [None if p is None or p[j] is None else p[j] for p in parts]
        cands, ids = gather(got, snap.map, q, {kind: depth})
        # the rest is one Fuse that ranks the kind's own list, ties by id as ShardedSource breaks
        # them (its rows as Fuse.run gives them, each made when read: hits are built from the pairs)
        pairs = fuse.ranked(cands, CandidateOrder(ids))[:rest.k]
        cands.rows = RankedRows(kind, pairs)
        lost = sorted(set(missing[j]) | {i for i, p in enumerate(got) if p is None})
        results.append((cands, ids, lost))
        final.update(map(itemgetter(0), pairs))
    have, failed = _fetch(snap.shards, snap.map, final, request)
    titles = {d: v.title for d, v in have.items()}
    share = (time.perf_counter() - t0) / len(texts)
    out = []
    for q, (cands, ids, lost) in zip(texts, results):
        rows = cands.rows
        if failed:      # a shard that did not answer the fetch: its hits are left out, and it is named
            lost = sorted(set(lost) | {snap.map.locate(d)[0] for d, _, _ in rows if d not in have})
            rows = [r for r in rows if r[0] in have]
        hits = ranked_hits(kind, rows.pairs, ids, titles) if isinstance(rows, RankedRows) else to_hits(rows, ids, titles)
        if request.with_text or request.with_meta:
            for h in hits:
                v = have[h.docno]
                if request.with_text:
                    h.text = v.text
                if request.with_meta and v.doc is not None:
                    h.meta, h.origin = v.doc.meta, origin(v.doc)
        result = SearchResult(hits, q, {n: round(1e3 * t, 2) for n, t in cands.timings.items()}, None, cands,
                              plan.for_query(q), round(1e3 * share, 2))
        result.generation, result.ids, result.missing_shards = snap.generation, ids, lost
        out.append(result)
    return out


def _statistics(snap, texts: list[str], conds: dict, run) -> tuple[int, list, list]:
    """searcher.statistics of each query, every shard asked once for the whole batch: (documents
    passing the filters, each query's per-shard statistics, each query's shards that did not answer)."""
    kinds = snap.stat_kinds()

    def ask(shard):
        many = getattr(shard, "stats_many", None)
        return many(texts, kinds, conds or None) if many is not None else \
            [shard.stats(q, kinds, conds or None) for q in texts]
    got = run.each(ask)
    missing = [i for i, g in enumerate(got) if g is None]
    answered = [g for g in got if g is not None]
    count = sum(g[0].count for g in answered) if conds and answered and texts else len(snap)
    stats = [[g[j].stats for g in answered] or None for j in range(len(texts))]
    return count, stats, [list(missing) for _ in texts]


def first_many(shard, plan_first, reps: list, filters) -> list:
    """shard.first of each query (None where a query skips this shard), in one call where the shard
    has first_many (every shard of ldr's; a third party's Shard may not)."""
    many = getattr(shard, "first_many", None)
    if many is not None:
        asked = [r for r in reps if r is not None]
        got = iter(many(plan_first, asked, filters) or [None] * len(asked))
        return [next(got) if r is not None else None for r in reps]
    return [shard.first(plan_first, r, filters) if r is not None else None for r in reps]


def _fetch(shards: list, map_: ShardMap, docnos: set, request) -> tuple[dict, set]:
    """({global docno: {"id", "title", ...}} of the batch's final hits, one fetch per shard; the
    shards that did not answer it)."""
    out: dict = {}
    failed = set()
    for s, pairs in map_.group(sorted(docnos)).items():     # a set: every docno once
        got = shards[s].fetch([loc for _, loc in pairs], text=request.with_text, meta=request.with_meta)
        if got is None:
            failed.add(s)
        else:
            out.update({g: got[loc] for g, loc in pairs if loc in got})
    return out, failed
