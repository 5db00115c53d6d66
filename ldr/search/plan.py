"""A query plan: the value one search runs, from validated options to hits.

`compile_plan` checks a request once against an index (its kinds, its recorded defaults, its size)
and returns a Plan: first stages (one Retrieve per kind: they run where the index's files are)
and the rest (fuse, windows, any registered stage, rerank, passages: they rank the gathered
candidates). `Plan.split()` gives the two halves, so a coordinator can run the rest over
candidates its shards retrieved; `Plan.explain()` prints every stage, its settings, and where
each setting came from (`ldr search --explain`).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable

from .. import components as registry
from ..errors import ConfigError, QueryError
from ..stages import HYBRID, Stage
from . import calibration
from .options import QueryOptions, SearchOptions, resolve
from .stages.base import Candidates, QuerySource, stage_type
from .stages.fuse import Fuse
from .stages.passages import Passages
from .stages.relevance import Relevance
from .stages.rerank import Rerank
from .stages.retrieve import Retrieve
from .stages.windows import Windows
from .window_scales import parse as parse_scales


@dataclass(frozen=True)
class Plan:
    query: str
    k: int
    settings: SearchOptions = field(compare=False)
    sources: dict = field(compare=False, default_factory=dict)   # setting → where its value came from
    first: tuple = ()                   # Retrieve stages (shard side)
    rest: tuple = ()                    # ranking stages (coordinator side)
    shards: int = field(compare=False, default=1)   # of the index it was compiled for (explain says)

    @property
    def stages(self) -> tuple:
        return self.first + self.rest

    def stage(self, name: str):
        return next((s for s in self.stages if s.name == name), None)

    @property
    def kinds(self) -> list[str]:
        return [s.kind for s in self.first]

    def for_query(self, query: str) -> "Plan":
        """This plan with another query's text (a batch's queries share one plan): what
        `dataclasses.replace(plan, query=query)` gives, in a quarter of its time (a run's plan a query)."""
        out = object.__new__(Plan)
        out.__dict__.update(self.__dict__)
        out.__dict__["query"] = query
        return out

    def split(self) -> tuple["Plan", "Plan"]:
        """(the first stages alone, the rest alone): run the first on each shard, merge their
        Candidates, run the rest once over them."""
        return replace(self, rest=()), replace(self, first=())

    def run_first(self, source: QuerySource, cands: Candidates | None = None) -> Candidates:
        cands = cands if cands is not None else Candidates(self.query)
        for s in self.first:
            cands = s.run(cands, source)
        return cands

    def run_rest(self, cands: Candidates, source: QuerySource) -> Candidates:
        for s in self.rest:
            cands = s.run(cands, source)
        cands.rows = cands.rows[:self.k]
        return cands

    def run(self, source: QuerySource) -> Candidates:
        return self.run_rest(self.run_first(source), source)

    def explain(self) -> str:
        """The plan as `ldr search --explain` prints it."""
        src = self.sources

        def origin(*names) -> str:
            found = sorted({src.get(n, "ldr") for n in names})
            return f"  [{', '.join(found)}]"

        lines = [f"plan for {self.query!r}: {self.k} hits"]
        if self.first:
            lines.append(f"first stages (each of {self.shards} shards):" if self.shards > 1 else "first stages:")
            for s in self.first:
                lines.append(f"  {s.name:<10} {s.describe()}" + origin("mode", "depth"))
        if self.rest:
            lines.append("then (the coordinator, over the shards' candidates):" if self.shards > 1 else "then:")
            why = {Stage.FUSED.value: ["fusion", "rrf_k"] + [f"weights.{k}" for k in self.kinds],
                   Stage.WINDOWS.value: ["window_depth", "window_weight", "window_vectors", "window_scales",
                                         "phrase_weight", "aspect_weight"],
                   Stage.RERANKED.value: ["rerank", "rerank_model", "rerank_depth", "rerank_weight"],
                   Stage.RELEVANCE.value: ["min_score"], Stage.PASSAGES.value: ["passages"]}
            for s in self.rest:
                lines.append(f"  {s.name:<10} {s.describe()}" + origin(*why.get(s.name, ["stages"])))
        off = [n for n, on in ((Stage.WINDOWS.value, self.stage(Stage.WINDOWS.value)),
                               (Stage.RERANKED.value, self.stage(Stage.RERANKED.value))) if on is None]
        if off:
            lines.append("off: " + ", ".join(off))
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"query": self.query, "k": self.k,
                "stages": [{"name": s.name, "side": s.side, "does": s.describe()} for s in self.stages],
                "sources": dict(self.sources)}


def compile_plan(query: str, request: QueryOptions, recorded: dict, components: dict, n_docs: int, *,
                 device: str | None = None, filtered: bool = False,
                 reranker: Callable[[SearchOptions, list[str]], Any] | None = None,
                 term_kind: Callable[[], str] | None = None, profile: dict | None = None) -> Plan:
    """The plan of one request on one index generation: `recorded` its manifest's search
    defaults, `components` its kinds, `n_docs` the documents the filters leave; `reranker(settings,
    searched kinds)` builds the second stage the settings ask for (None: none); `term_kind()` names
    the lexical kind the window stage scores windows with; `profile`: the index's language defaults
    (ldr/language_defaults.py)."""
    opts, sources = resolve(request, recorded, components, device, profile)
    if opts.mode != HYBRID and opts.mode not in components:
        have = ", ".join(registry.in_order(components)) or "none"
        raise ConfigError(f"this index has no {opts.mode!r} component (it has: {have}); pick another --mode")
    sources["passages"] = "request" if request.passages else "ldr"
    sources["min_score"] = "request" if request.min_score is not None else "ldr"
    k = min(request.k, n_docs)            # more hits than documents cannot be returned
    opts.depth, opts.rerank_depth = min(opts.depth, n_docs), min(opts.rerank_depth, n_docs)
    kinds = registry.in_order(components) if opts.mode == HYBRID else [opts.mode]
    fused = len(kinds) > 1          # a hybrid search fuses, even the one leg its weights leave
    if fused:
        # a leg weighted 0 adds nothing to the fusion: not searched (it may still rescore, --rerank KIND)
        kinds = [n for n in kinds if opts.weights[n] != 0] or kinds
    second = reranker(opts, kinds) if reranker is not None and (opts.rerank or opts.rerank_model) else None
    # a lexical kind weighted 0 in the fusion adds no window evidence either
    windows = opts.window_weight > 0 and term_kind is not None and opts.weights.get(term_kind(), 1.0) != 0
    depth = max(opts.depth, k, opts.rerank_depth if second is not None else 0)
    own = recorded.get("relevance_fit")        # `ldr tune --relevance`: fitted on these kinds' estimate
    relevance = _relevance(components, kinds, request.min_score, k,
                           own if own and own.get("kinds") == list(kinds) else None) \
        if request.relevance or request.min_score is not None else ()
    asks = relevance[0].distributions if relevance else ()
    bounds = relevance[0].names if relevance else ()
    first = tuple(Retrieve(n, depth, filtered, n in asks, n in bounds) for n in kinds)
    later: list = []
    if windows:
        lexical = term_kind()
        later.append(Windows(opts.window_depth, opts.window_weight, opts.window_vectors, lexical,
                             tuple((n, opts.weights[n]) for n in kinds if n != lexical), parse_scales(opts.window_scales),
                             opts.phrase_weight, opts.aspect_weight))
    if second is not None:
        later.append(Rerank(second, opts.rerank_depth, opts.rerank_weight, opts.rerank_windows))
    for name, values in (request.stages or {}).items():
        later.insert(_position(later, stage_type(name).after), stage_type(name).build(values))
    keep = max([k] + [s.needs() for s in later])
    fuse = Fuse(tuple(kinds), opts.fusion, tuple((n, opts.weights[n]) for n in kinds), opts.rrf_k, keep, fused)
    rest = (fuse, *later) + relevance \
        + ((Passages(request.passages, k),) if request.passages else ())
    return Plan(query, k, opts, sources, first, rest)


def _relevance(components: dict, kinds: list[str], min_score: float | None, k: int, own: dict | None = None) -> tuple:
    """The relevance stage, where a calibration was fitted for these kinds (search/calibration.py);
    `own`: the index's recalibration on its user's labels (eval/relevance_fit.py)."""
    fit = calibration.fit_for(components, kinds)
    query_fit = calibration.query_fit_for(components, kinds)
    if fit is None and query_fit is None:
        if min_score is not None:
            scored = ", ".join(f"{k} ({m})" if m else k for k, m in calibration.models(components, kinds).items())
            raise QueryError(f"min_score needs a calibrated relevance, and none was fitted for {scored}: a model or "
                             "scorer other than the fitted ones (a Lucene BM25 scores with Lucene's own). Search "
                             "without it, index with --bm25 native (the default) or add a dense or sparse leg, or "
                             "fit one (bench/fit_own_calibration.py)")
        return ()
    return (Relevance(tuple(fit["weights"]) if fit else (), fit, min_score, query_fit, k, own),)


_ORDER = (Stage.FUSED.value, Stage.WINDOWS.value, Stage.RERANKED.value)


def _position(later: list, after: str) -> int:
    """Where a registered stage that runs after the built-in stage `after` goes among `later`
    (the stages after fusion): after it when present, else where it would have been."""
    rank = _ORDER.index(after) if after in _ORDER else len(_ORDER)
    at = 0
    for i, s in enumerate(later):
        if s.name in _ORDER and _ORDER.index(s.name) <= rank or s.name not in _ORDER:
            at = i + 1
        else:
            break
    return at
