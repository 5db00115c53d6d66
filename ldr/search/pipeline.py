"""The query pipeline: first-stage retrievers → fusion → rerank of the top candidates → Hits.

Each retriever encodes the query once (`encode`), retrieves (`search_rep`); the reranker reuses
those query representations through a per-query context. Every hit carries each stage's score.
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from .. import components as registry
from ..errors import ConfigError, IndexFormatError, LdrError
from .fusion import fuse
from ..index.topk import top_k_dict
from ..rerank.passage import zscore
from .hits import Hit
from .options import SearchOptions, modes  # noqa: F401  (the resolved options)



@dataclass
class QueryContext:
    """What one query has computed so far, shared by the stages."""

    query: str
    retrievers: dict
    texts: object                       # callable docno → text
    reps: dict = field(default_factory=dict)
    first_stage: dict = field(default_factory=dict)   # name → {docno: score}
    fused: dict = field(default_factory=dict)         # docno → fused score (hybrid)
    windowed: dict = field(default_factory=dict)      # docno → score after the window stage
    reranked: dict = field(default_factory=dict)      # docno → second-stage score
    rerank_features: dict = field(default_factory=dict)  # docno → {feature: value}
    timings: dict = field(default_factory=dict)
    finder: object = None               # PassageFinder: a document's best windows for this query
    uids: object = None                 # docno → uid (stable keys for the finder's window cache)
    rerank_windows: int | None = None   # windows per document for a cross-encoder (None: its setting)
    fetch: object = None                # callable [docno] → {docno: text}: one docstore read for many
    read: dict = field(default_factory=dict)   # the texts this query has read, by docno

    def passages(self, docnos: list[int], n: int) -> dict:
        """{docno: its n best passages} (empty lists when the index cannot say)."""
        if self.finder is None or n < 1:
            return {d: [] for d in docnos}
        reps = {k: self.rep(k) for k in self.finder.vector_kinds}
        keys = {d: int(self.uids[d]) for d in docnos} if self.uids is not None else None
        self.prefetch(docnos)
        return self.finder.find(self.query, reps, {d: self.text(d) for d in docnos}, n, keys)

    def rep(self, name: str):
        if name not in self.reps:
            self.reps[name] = self.retrievers[name].encode(self.query)
        return self.reps[name]

    def prefetch(self, docnos) -> None:
        """Read the texts of `docnos` not read yet, together (a docstore read per document costs
        ~0.5 ms of fixed overhead: the most of a window stage over uncached candidates)."""
        want = [d for d in docnos if d not in self.read]
        if want and self.fetch is not None:
            self.read.update(self.fetch(want))

    def text(self, docno: int) -> str:
        if docno not in self.read:
            self.read[docno] = self.texts(docno)
        return self.read[docno]


def run_query(query: str, k: int, retrievers: dict, opts: SearchOptions, reranker=None, texts=None,
              tiebreak=None, allow=None, finder=None, reps: dict | None = None, uids=None,
              fetch=None) -> tuple[list, QueryContext]:
    """Ranked [(docno, score, {stage: score})] for one query, and its context (timings, reps).

    `tiebreak[docno]` orders equal scores (the rank of the document's id, so that rankings do not
    depend on the order documents were indexed in); default: by docno. `allow`: a mask over
    docnos (a filter) every retriever applies before fusion. `reps`: query representations
    already computed (batch search encodes queries together). `fetch`: reads many texts at once."""
    opts.check()
    names = registry.in_order(retrievers) if opts.mode == "hybrid" else [opts.mode]
    fused = len(names) > 1
    if fused and isinstance(opts.weights, dict):
        # a leg weighted 0 adds nothing to the fusion: not searched (it may still rescore, --rerank KIND)
        names = [n for n in names if opts.weights.get(n, 1.0) != 0] or names
    for n in names:
        if n not in retrievers:
            have = ", ".join(sorted(retrievers)) or "none"
            raise ConfigError(f"this index has no {n!r} component (it has: {have}); rebuild with it or pick another --mode")
    ctx = QueryContext(query, retrievers, texts, finder=finder, uids=uids, rerank_windows=opts.rerank_windows,
                       fetch=fetch)
    ctx.reps.update(reps or {})
    depth = max(opts.depth, k, opts.rerank_depth if reranker else 0)
    lists = {}
    for n in names:
        t = time.perf_counter()
        rep = ctx.rep(n)
        with damage_guard(n):
            lists[n] = (retrievers[n].search_rep(rep, depth) if allow is None
                        else retrievers[n].search_rep(rep, depth, allow=allow))
        ctx.first_stage[n] = dict(lists[n])
        ctx.timings[n] = time.perf_counter() - t
    # a lexical kind weighted 0 in the fusion adds no window evidence either
    windows = opts.window_weight > 0 and finder is not None and \
        (opts.weights or {}).get(finder.term_kind, 1.0) != 0
    limit = max(k, opts.rerank_depth if reranker is not None else 0, opts.window_depth if windows else 0)
    if not fused:
        # a single retriever: its own ranking, equal scores by id (the one top-k rule)
        ranked = lists[names[0]][:limit] if tiebreak is None else top_items(ctx.first_stage[names[0]], limit, tiebreak)
        rows = [(d, sc, {names[0]: sc}) for d, sc in ranked]
    else:
        t = time.perf_counter()
        ctx.fused = fuse(ctx.first_stage, opts.fusion, opts.weights, opts.rrf_k)
        ctx.timings["fusion"] = time.perf_counter() - t
        stages = [(n, ctx.first_stage[n]) for n in names]
        rows = [(d, sc, {**{n: r[d] for n, r in stages if d in r}, "fused": sc})
                for d, sc in top_items(ctx.fused, limit, tiebreak)]
    if windows and rows:
        rows = window_stage(ctx, rows, opts, tiebreak)
    if reranker is not None and rows:
        t = time.perf_counter()
        head, tail = rows[:opts.rerank_depth], rows[opts.rerank_depth:]
        scores, feats = reranker.rescore(ctx, [d for d, _, _ in head])
        final = mix(scores, [sc for _, sc, _ in head], opts.rerank_weight)
        reranked = []
        for i, (d, _, st) in enumerate(head):
            st = dict(st, rerank=float(scores[i]))
            for f, vals in feats.items():
                st[f"rerank.{f}"] = float(vals[i])
            ctx.rerank_features[d] = {f: float(vals[i]) for f, vals in feats.items()}
            reranked.append((d, float(final[i]), st))
        reranked.sort(key=lambda r: (-r[1], r[0] if tiebreak is None else tiebreak[r[0]]))
        ctx.reranked = {d: s for d, s, _ in reranked}
        # documents past the rerank depth keep their order, below every reranked one
        rows = reranked + tail
        ctx.timings["rerank"] = time.perf_counter() - t
    return rows[:k], ctx


def window_stage(ctx: QueryContext, rows: list, opts: SearchOptions, tiebreak=None) -> list:
    """The top `window_depth` rows rescored by their best window: (1 - w)·minmax(first-stage score)
    + w·minmax(the BM25 of the document's best window among these candidates' windows). A long
    document matching the query in one place beats one matching it thinly everywhere (qmsum-train
    +3.1 nDCG@10 held out, see ldr/options.py); rows below the depth keep their order under every
    rescored one."""
    t = time.perf_counter()
    head, tail = rows[:opts.window_depth], rows[opts.window_depth:]
    docnos = [d for d, _, _ in head]
    reps = {k: ctx.rep(k) for k in ctx.finder.vector_kinds}
    keys = {d: int(ctx.uids[d]) for d in docnos} if ctx.uids is not None else None
    known = ctx.finder.cache.lengths    # documents analysed before: their text is not needed
    ctx.prefetch([d for d in docnos if keys is None or keys[d] not in known])
    best = ctx.finder.best_window(ctx.query, reps, docnos, ctx.text, keys)
    w = opts.window_weight
    window = np.asarray([best[d] for d in docnos])
    first = np.asarray([sc for _, sc, _ in head], dtype=np.float64)
    lo, span = first.min(), first.max() - first.min()
    final = (1 - w) * minmax(first) + w * minmax(window)
    out = [(d, float(final[i]), dict(st, window=float(window[i]), windowed=float(final[i])))
           for i, (d, _, st) in enumerate(head)]
    out.sort(key=lambda r: (-r[1], r[0] if tiebreak is None else tiebreak[r[0]]))
    # the rows below keep their order on the same scale, at or under 0 (a reranker mixes these scores)
    for d, sc, st in tail:
        v = (1 - w) * (sc - lo) / span if span > 0 else sc - lo
        out.append((d, float(v), dict(st, windowed=float(v))))
    ctx.windowed = {d: s for d, s, _ in out}
    ctx.timings["windows"] = time.perf_counter() - t
    return out


def minmax(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    span = x.max() - x.min() if len(x) else 0.0
    return (x - x.min()) / span if span > 0 else np.zeros_like(x)


@contextmanager
def damage_guard(name: str):
    """What a component's reader raises while searching a damaged file (a Rust panic from tantivy,
    a BaseException; ValueError/OverflowError from a decoder) becomes one clear IndexFormatError
    naming `ldr check`, for the CLI and the server alike; ldr's own errors pass unchanged."""
    try:
        yield
    except (LdrError, KeyboardInterrupt, SystemExit, GeneratorExit, MemoryError):
        raise
    except BaseException as e:
        if not isinstance(e, Exception) and type(e).__name__ != "PanicException":
            raise
        raise IndexFormatError(
            f"the {name} component failed while searching ({type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}); "
            "its files are probably damaged: run `ldr check INDEX`, then restore the index or rebuild it "
            "with `ldr index`") from None


def mix(second, first, weight: float) -> np.ndarray:
    """The reranked candidates' final scores: the second stage's own (weight 1), or
    weight·z(second) + (1 - weight)·z(first) with both z-normalised over the candidates, so that
    a reranker that knows the domain less well than the first stage refines its order instead
    of replacing it (`ldr tune` chooses the weight)."""
    second = np.asarray(second, dtype=np.float64)
    if weight >= 1:
        return second
    return weight * zscore(second) + (1 - weight) * zscore(np.asarray(first, dtype=np.float64))


def top_items(scores: dict, k: int, tiebreak=None) -> list[tuple[int, float]]:
    """The k best (docno, score) of {docno: score} (ldr/index/topk.py's rule)."""
    return top_k_dict(scores, k, tiebreak)


def to_hits(rows, ids: list[str], titles: list[str]) -> list[Hit]:
    bad = [d for d, _, _ in rows if not 0 <= d < len(ids)]
    if bad:
        raise IndexFormatError(f"a retriever returned document number {bad[0]}, but the index has {len(ids)} "
                               "documents: a component is damaged; run `ldr check` and rebuild the index")
    return [Hit(id=ids[d], score=s, rank=r, title=titles[d], docno=d, scores=st)
            for r, (d, s, st) in enumerate(rows, 1)]
