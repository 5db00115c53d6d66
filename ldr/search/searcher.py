"""One search over shards pinned to one point in time: an unsharded index is the 1-shard case,
a sharded index N local shards, `ldr serve --ray` N remote ones.

A search is a sequence of values (Elasticsearch's query-then-fetch, Vespa's global phase): the
shards' statistics for the query (documents passing the filters, BM25's document count, length
and term frequencies, summed), the plan (compiled without I/O or a model), the query encoded
once, each shard's first-stage lists with their candidates' ids, one gathered Candidates, the
coordinator's stages over it (window features and passages asked of the shards holding the
candidates), then the ids, titles, texts and metadata of the final hits only. Every call names
the one `Snapshot` the search took when it started: a refresh or a writer's commit meanwhile
changes nothing it returns, and the coordinator never reads a shard's files.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from . import exact_lists
from .gather import Exact, ShardMap, ShardedSource, gather
from .hits import SearchResult, origin, to_hits
from .options import QueryOptions
from ..pools import ProcessPool
from ..stages import ENCODE


@dataclass
class Snapshot:
    """A point in time: the generation every answer names, the settings every shard shares (the
    first shard's manifest), the shards (gather.Shard: values only, each pinned to its
    generation) and `side(kind)`: the kind's query side (components/query_side.py: it encodes the
    query and sums the statistics; it holds the kind's model and reads no file). Built the same
    way for one index, N local shards and N Ray Serve replicas."""
    generation: int
    manifest: dict
    shards: list
    side: Callable
    cluster: dict | None = field(default=None, repr=False)   # a sharded index's cluster commit
    remote: bool = False        # its shards answer over a network (Ray Serve): a round costs more than work
    views: list = field(default_factory=list, repr=False)     # the pinned generations read here (none on Ray)
    _about: list | None = field(default=None, repr=False)
    _map: ShardMap | None = field(default=None, repr=False)
    _terms: dict = field(default_factory=dict, repr=False)

    def about(self) -> list:
        """Each shard's describe() (asked once per point in time)."""
        if self._about is None:
            self._about = [s.describe() for s in self.shards]
        return self._about

    @property
    def map(self) -> ShardMap:
        if self._map is None:
            self._map = ShardMap([a.rows for a in self.about()])
        return self._map

    def terms(self, kind: str):
        """The TermSet a kind's documents hold over every shard (values.py), or None: the kind does
        not say, or a shard did not (a remote one with no replica). Its query is weighed over it."""
        if kind not in self._terms:
            from ..values import TermSet

            told = [getattr(a, "vocabularies", {}).get(kind) for a in self.about()]
            self._terms[kind] = TermSet.union(told) if told and all(t is not None for t in told) else None
        return self._terms[kind]

    def __len__(self) -> int:
        return sum(a.docs for a in self.about())

    def fields(self) -> set:
        """The metadata fields of every shard's documents (a filter on one some shards lack is valid)."""
        return set().union(*(a.fields for a in self.about())) if self.shards else set()

    def conditions(self, filters) -> dict:
        """The filters normalised and checked against every shard's fields ({}: none)."""
        from . import filters as _filters

        conds = _filters.normalise(filters)
        if conds:
            _filters.check_fields(conds, self.fields())
        return conds

    def stat_kinds(self) -> list[str]:
        from .. import components as registry
        comps = self.manifest["components"]
        return [n for n, kind in registry.kinds(comps) if kind.collection_stats(comps[n])]


def compile_for(snap: Snapshot, query: str, request: QueryOptions, n_docs: int, filtered: bool, device, spec) -> Any:
    """The plan of `request` on this point in time (`n_docs`: the documents the filters leave);
    `spec(opts, kinds)`: the second stage as a RerankerSpec (a value: nothing is loaded)."""
    from ..language_defaults import of_manifest
    from .passages import term_kind
    from .plan import compile_plan

    components = snap.manifest["components"]
    return compile_plan(query, request, snap.manifest.get("search", {}), components, max(n_docs, 1),
                        device=device, filtered=filtered, reranker=spec,
                        term_kind=lambda: term_kind(components), profile=of_manifest(snap.manifest))


def encode(snap: Snapshot, query: str, kinds, reps: dict | None = None, stats: list | None = None,
           spent: dict | None = None) -> dict:
    """The query encoded once per kind (`reps`: already encoded, a batch's); a kind that scores
    with collection statistics (BM25) gets every shard's summed (`stats`) when there are several.
    `spent`: each kind's encoding time in seconds is added there (`encode.<kind>`), so that a
    search's timings show where most of a query goes (its query encoders; one encoded beside
    another: the time the search waited for it)."""
    done = dict(reps or {})
    fresh = [k for k in kinds if k not in done]
    # a kind that narrows its queries (sparse) is given its index's terms (found here: a snapshot's
    # memos are filled on the caller's thread alone)
    asks = [(k, snap.side(k), snap.terms(k)) for k in fresh]
    models = [a for a in asks if getattr(a[1], "runs_a_model", False)]
    if len(models) > 1 and _SEARCHING[0] <= 1 and _SIDE_BY_SIDE.acquire(blocking=False):
        try:
            got, took = _side_by_side(query, [a for a in asks if a not in models[1:]], models[1:])
        finally:
            _SIDE_BY_SIDE.release()
    else:
        got, took = _encode_each(query, asks)
    if spent is not None:
        spent.update((f"{ENCODE}.{k}", took[k]) for k in fresh)
    done.update((k, got[k]) for k in fresh)
    for kind in kinds:
        if stats is not None and kind in stats[0]:
            done[kind] = snap.side(kind).with_collection_stats(done[kind], [st[kind] for st in stats])
    return done


# A search's query models run side by side: the first on the searching thread, the others on one
# worker. ONNX Runtime's two threads leave gaps in a MiniLM query (its operators are small), which a
# SPLADE query fills (bench/README.md: "Warm search"). Only a search running alone in its process
# does so: where searches run at once (a server), the cores are busy already.
_SIDE_BY_SIDE = threading.Lock()
_WORKER = ProcessPool(1, "ldr-query-encoder")
_SEARCHING = [0]        # searches running in this process now
_COUNT = threading.Lock()


def _side_by_side(query: str, own: list, aside: list) -> tuple[dict, dict]:
    """_encode_each of `own` on this thread and of `aside` on the worker at once. A kind encoded
    aside counts the time the search waited for it (a share of the wait past this thread's own
    encoding), so that a search's timings still add up to no more than it took."""
    t = time.perf_counter()
    job = _WORKER.get().submit(_encode_each, query, aside)
    try:
        got, took = _encode_each(query, own)
    finally:
        theirs, their_took = job.result()      # the worker's error, if any, is raised here
    waited = max(time.perf_counter() - t - sum(took.values()), 0.0)
    whole = sum(their_took.values()) or 1.0
    took.update((k, waited * v / whole) for k, v in their_took.items())
    return {**got, **theirs}, took


def _encode_each(query: str, asks: list) -> tuple[dict, dict]:
    """({kind: the query's representation}, {kind: seconds}) of `asks` [(kind, side, terms)]."""
    out, took = {}, {}
    for kind, side, terms in asks:
        t = time.perf_counter()
        out[kind] = side.encode(query) if terms is None else side.encode(query, terms)
        took[kind] = time.perf_counter() - t
    return out, took


@dataclass
class Run:
    """How one search runs: `each(call)` → [call(shard) for every shard] (None where a shard did
    not answer; in parallel where there are several), the passage finder's factory and the second
    stage's binder."""
    each: Callable
    finder: Callable                  # finder(weights, kinds) -> PassageFinder (the coordinator's half)
    bind: Callable                    # bind(spec, exact) -> a Reranker; exact(kind): its exact scores
    device: str | None = None


def statistics(snap: Snapshot, query: str, conds: dict, run: Run) -> tuple[int, list | None, list]:
    """(documents passing the filters, each shard's statistics for the query or None when one
    shard is all: it scores with its own, the shards that did not answer)."""
    if len(snap.shards) == 1 and not conds:
        return len(snap), None, []
    got = run.each(lambda s: s.stats(query, snap.stat_kinds(), conds or None))
    missing = [i for i, g in enumerate(got) if g is None]
    answered = [g for g in got if g is not None]
    count = sum(g.count for g in answered) if conds else len(snap)
    # a shard that did not answer is named in the result; the others score with what they hold
    return count, ([g.stats for g in answered] or None), missing


def search(snap: Snapshot, query: str, request: QueryOptions, run: Run, spec, *, t0: float | None = None,
           reps: dict | None = None) -> SearchResult:
    """`query` (prepared) answered from `snap` end to end, in two rounds of calls to the shards
    most often: the first stages (with what scores native BM25's lists exactly, the documents the
    filters leave and the likely window candidates' features), then the final hits' passages and
    fields (search/exact_lists.py and the module's docstring say when a third is needed)."""
    with _COUNT:
        _SEARCHING[0] += 1
    try:
        return _search(snap, query, request, run, spec, t0, reps)
    finally:
        with _COUNT:
            _SEARCHING[0] -= 1


def _search(snap: Snapshot, query: str, request: QueryOptions, run: Run, spec, t0: float | None,
            reps: dict | None) -> SearchResult:
    conds = snap.conditions(request.filters)
    plan = compile_for(snap, query, request, len(snap), bool(conds), run.device, spec)
    if len(snap) == 0:
        return _empty(snap, plan, [])
    spent: dict = {}
    reps = encode(snap, query, plan.kinds, reps, None, spent)
    sums = [k for k in snap.stat_kinds() if k in plan.kinds] if len(snap.shards) > 1 else []
    totals = exact_lists.totals_of(snap, query, sums)
    o = plan.settings
    # the relevance stage reads the hits' window evidence (cover) too
    windows = request.passages or o.rerank_model or o.window_weight or plan.stage("relevance") is not None
    finder = run.finder(o.weights, plan.kinds) if windows else None
    # the window features come with the first stages from one shard (its own are the candidates) and
    # from remote ones (a round trip saved); local shards are asked for exactly the candidates after
    # the fusion (a call in this process costs less than describing twice as many documents)
    ask = _window_ask(plan, finder, query, len(snap.shards)) if snap.remote or len(snap.shards) == 1 else None
    first, _ = plan.split()
    sent = {**reps, **totals}
    parts = run.each(lambda s: s.first(first, sent, conds or None, ask))
    rounds = 1
    missing = [i for i, p in enumerate(parts) if p is None]
    if len(missing) == len(snap.shards):
        return _empty(snap, plan, missing, rounds)
    if conds:       # the plan again, for the documents the filters leave (fewer hits, shallower lists)
        count = sum(p.count for p in parts if p is not None)
        plan = compile_for(snap, query, request, count, True, run.device, spec)
        if count == 0:
            return _empty(snap, plan, missing, rounds)
        first, _ = plan.split()
    depths = {s.kind: s.depth for s in plan.first}
    if totals:
        settled = exact_lists.settle(snap, parts, query, first, depths, totals,
                                     lambda i, p, r: _again(snap, i, p, r, conds))
        parts, rounds = settled.parts, rounds + bool(settled.asked_again)
        reps.update(settled.reps)
        missing = sorted(set(missing) | {i for i, p in enumerate(parts) if p is None})
    rest = plan.split()[1]
    cands, ids = gather([None if i in missing else p for i, p in enumerate(parts)], snap.map, query, depths)
    source = ShardedSource(query, reps, snap.shards, snap.map, ids, finder,
                           lambda k: encode(snap, query, [k])[k],
                           lambda sp: run.bind(sp, lambda k: Exact(k, snap.shards, snap.map)),
                           run.each if snap.remote else None)     # local shards: in turn (their work holds the GIL)
    source.with_meta = request.with_meta
    for i, p in enumerate(parts):       # the features the shards sent with their lists
        if p is not None and p.features:
            off = snap.map.offsets[i]
            source.feats.update({off + d: f for d, f in p.features.items()})
    cands = rest.run_rest(cands, source)
    hits = fetch(snap, source, cands, request, ids)
    second = plan.stage("reranked")
    result = SearchResult(hits, query, {n: round(1e3 * t, 2) for n, t in {**spent, **cands.timings}.items()},
                          second.reranker.name if second else None, cands, plan,
                          round(1e3 * (time.perf_counter() - t0), 2) if t0 is not None else None)
    result.finder, result.generation, result.ids = finder, snap.generation, ids
    result.missing_shards = sorted(set(missing) | source.missing)
    result.rounds = rounds + source.rounds
    return result


def _empty(snap: Snapshot, plan, missing: list, rounds: int = 0) -> SearchResult:
    """No hit: nothing passes the filters, an empty index, or no shard answered."""
    (empty := SearchResult([], plan.query, {}, None, None, plan)).generation = snap.generation
    empty.missing_shards, empty.rounds = missing, rounds
    return empty


def _window_ask(plan, finder, query: str, shards: int):
    """What the shards describe with their first stages: the window features of the window stage's
    candidates, or without that stage of the hits (the relevance's cover, the passages read them);
    None where nothing reads windows. Of `shards`, each describes twice its share of them (and 8
    more): the window stage's 50 over 4 shards are 34 a shard, not 50 (describing 200 candidates
    made a 4-shard search of 10k documents 65 ms instead of 40); a candidate none described is
    asked for after the fusion."""
    from ..values import WindowAsk

    if finder is None:
        return None
    stage = plan.stage("windows")
    fuse = next(s for s in plan.rest if s.name == "fused")
    wanted = stage.depth if stage is not None else plan.k
    # one shard ranks exactly; several rank BM25 with estimated frequencies, so a few more
    each = wanted if shards == 1 else min(wanted + 8, 2 * -(-wanted // shards) + 8)
    return WindowAsk(tuple(finder.vector_kinds), tuple(finder.term_list(query)), fuse, each)


def _again(snap: Snapshot, i: int, plan, reps: dict, conds: dict):
    """Shard i's first stages of `plan` once more, with the exact statistics (`reps`)."""
    return snap.shards[i].first(plan, reps, conds or None)


def fetch(snap: Snapshot, source: ShardedSource, cands, request: QueryOptions, ids: dict) -> list:
    """The final hits: ids, titles, their passages, and (asked for) texts and metadata, read from
    the shards that hold them, in one call per shard (none when the passages' call brought them),
    and from no other document."""
    docnos = [d for d, _, _ in cands.rows]
    have = source.fetched
    need = [d for d in docnos if d not in have or (request.with_meta and not have[d].with_meta)
            or (request.with_text and d not in source.read)]
    if need:      # what the passages' fetch did not bring (often nothing: no call at all)
        have.update(source._each(need, lambda sh, locs, _: sh.fetch(
            locs, text=request.with_text and any(d not in source.read for d in need), meta=request.with_meta)))
    got = {d: have[d] for d in docnos if d in have}
    hits = to_hits([r for r in cands.rows if r[0] in got], ids, {d: v.title for d, v in got.items()})
    for h in hits:
        v = got[h.docno]
        h.passages = cands.passages.get(h.docno, [])
        if request.with_text:
            h.text = v.text if v.text is not None else source.read.get(h.docno)
        if request.with_meta and v.doc is not None:
            h.meta, h.origin = v.doc.meta, origin(v.doc)
    source.release()    # the result keeps its candidates' scores, not 50 candidates' texts
    return hits
