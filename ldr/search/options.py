"""The search options, defined once. `Index.search`, the CLI's `ldr search` flags, the server's
request model, the Python client, `ldr tune`'s settings and the LangChain / LlamaIndex adapters
all derive from (or pass through) `QueryOptions`; tests/test_options.py walks its fields through
every interface.

A field left at None takes the index's default (its manifest's `search` entry, see `ldr info`).
"""
from __future__ import annotations

import math
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Any

from .. import components as registry
from ..errors import ConfigError, QueryError
from ..stages import HYBRID
from .fusion import METHODS
from .query import check_weights


def _opt(default, help: str, *, ge=None, le=None, cli: tuple | str, server: bool | str = True,
         server_default=MISSING):
    """A field with what each interface needs: bounds, help, the CLI flags (or why `ldr search`
    has none: str), whether a server takes it (or why not: str), the server's default when it
    differs."""
    meta = {"help": help, "ge": ge, "le": le, "cli": cli, "server": server}
    if server_default is not MISSING:
        meta["server_default"] = server_default
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class QueryOptions:
    k: int = _opt(10, "Number of hits.", ge=1, cli=("-k",))
    mode: str | None = _opt(None, "Retrievers: hybrid (every one the index has, fused) or one kind alone "
                                  "(bm25, dense, sparse, ...).", cli=("--mode",))
    fusion: str | None = _opt(None, "Fusion method: rrf, minmax or zscore.", cli=("--fusion",))
    weights: dict[str, float] | None = _opt(None, "Fusion weights per retriever, e.g. bm25=1,dense=0.5 (the "
                                                  "others keep the index's).", cli=("--weights",))
    rrf_k: int | None = _opt(None, "The k of reciprocal-rank fusion.", ge=1, cli=("--rrf-k",))
    depth: int | None = _opt(None, "Candidates per retriever.", ge=1, le=100_000, cli=("--depth",))
    window_weight: float | None = _opt(None, "Share (0-1) of each top candidate's best-window BM25 in its score, "
                                             "mixed with the first stage's (0: off).", ge=0, le=1,
                                       cli=("--window-weight",))
    window_vectors: float | None = _opt(None, "Share (0-1) of the vector kinds' best-window similarity in the window "
                                              "evidence, beside the best window's BM25 (0: BM25 alone).", ge=0, le=1,
                                        cli=("--window-vectors",))
    window_depth: int | None = _opt(None, "First-stage candidates rescored by their best window.",
                                    ge=1, le=1000, cli=("--window-depth",))
    window_scales: str | None = _opt(None, "The windows whose BM25 is the window evidence: TERMS:SHARE pairs "
                                           "(windows of that many analysed terms, each half overlapping the next), "
                                           "e.g. 120:0.6,40:0.4, or 'passages' (the vector kinds' passages).",
                                     cli=("--window-scales",))
    phrase_weight: float | None = _opt(None, "Share (0-1) of the phrase evidence in the window stage's score: the "
                                             "query's neighbouring terms found side by side in a candidate, BM25 "
                                             "among the candidates (0: off).", ge=0, le=1, cli=("--phrase-weight",))
    aspect_weight: float | None = _opt(None, "Share (0-1) of the aspect evidence in the window stage's score, after "
                                             "the phrases: each sentence of a query of several finds its own best "
                                             "window of 40 terms, summed (0: off).", ge=0, le=1,
                                       cli=("--aspect-weight",))
    rerank: bool | str | None = _opt(None, "Second stage: passage (the passage rescorer), none, or a kind's exact "
                                           "scores (colbert); unset: the index's default.",
                                     cli=("--rerank",))
    rerank_model: str | None = _opt(None, "Cross-encoder for the second stage (any HF sequence-classification "
                                          "model or folder).", cli=("--rerank-model",),
                                    server="a server loads no model a request names (the index's reranker serves)")
    rerank_depth: int | None = _opt(None, "Candidates reranked.", ge=1, cli=("--rerank-depth",))
    rerank_weight: float | None = _opt(None, "The reranker's share (0-1) of the final score, mixed with the first "
                                             "stage's (1: the reranker's score alone).", ge=0, le=1,
                                       cli=("--rerank-weight",))
    rerank_windows: int | None = _opt(None, "Best passages per document a cross-encoder scores (fewer is faster "
                                            "on a CPU; default: the cross-encoder's own, 8).", ge=1, le=64, cli=("--rerank-windows",))
    filters: dict[str, Any] | None = _opt(None, "Metadata filters applied before fusion, e.g. lang=de, "
                                                "'path=contracts/*', year>=2020.", cli=("--filter",))
    stages: dict[str, dict] | None = _opt(None, "Registered extra stages to run, with their settings: "
                                                "{name: {setting: value}} (`--stage name:setting=value`).",
                                          cli=("--stage",))
    min_score: float | None = _opt(None, "Drop hits whose relevance (an estimate of P(relevant), 0-1, the same "
                                         "whatever the other candidates) is below this.", ge=0, le=1,
                                   cli=("--min-score",))
    relevance: bool = _opt(True, "Estimate each hit's relevance (False: none, unless min_score asks; a run of "
                                 "1,000 hits a query writes several times faster without it).",
                           cli="`ldr search --queries` writes runs without it (a run file holds no relevance)")
    passages: int = _opt(1, "Best passages per hit (character offsets into the text; 0: none).", ge=0,
                         cli=("-p", "--passages"))
    with_text: bool = _opt(False, "Each hit's full text.", cli=("--text",))
    with_meta: bool = _opt(True, "Each hit's metadata.", cli="the table shows none; --json always includes it",
                           server="hits always carry their metadata")

    def __post_init__(self):
        self.check()

    def check(self) -> None:
        """Types and bounds of every field (the index's own checks follow: known modes and kinds)."""
        for f in fields(self):
            v = getattr(self, f.name)
            if v is None:
                continue
            lo, hi = f.metadata.get("ge"), f.metadata.get("le")
            if f.type in ("int", "int | None"):
                if not isinstance(v, int) or isinstance(v, bool):
                    raise QueryError(f"{f.name} must be a whole number (got {v!r})")
            elif f.type == "float | None":
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                    raise QueryError(f"{f.name} must be a number (got {v!r})")
            elif f.type == "bool":
                if not isinstance(v, bool):
                    raise QueryError(f"{f.name} must be true or false (got {v!r})")
            elif f.type.startswith("dict") and not isinstance(v, dict):
                raise QueryError(f"{f.name} must be a mapping (got {type(v).__name__})")
            elif f.type == "str | None" and not isinstance(v, str):
                raise QueryError(f"{f.name} must be a string (got {v!r})")
            if lo is not None and v < lo or hi is not None and v > hi:
                bounds = f"from {lo} to {hi}" if hi is not None else f"at least {lo}"
                raise QueryError(f"{f.name} must be {bounds} (got {v!r})")
        if self.rerank is not None and not isinstance(self.rerank, (bool, str)):
            raise QueryError(f"rerank must be true/false or a reranker name (got {self.rerank!r})")

    @classmethod
    def of(cls, **options) -> "QueryOptions":
        """From keyword arguments; an unknown name is a clear error (not a TypeError)."""
        unknown = sorted(set(options) - set(names()))
        if unknown:
            raise QueryError(f"unknown search option(s) {', '.join(unknown)}; the options are: {', '.join(names())}")
        return cls(**options)

    def given(self) -> dict:
        """The fields set to something other than their default (what a client sends)."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if getattr(self, f.name) != (f.default if f.default is not MISSING else f.default_factory())}

    def to_dict(self) -> dict:
        return asdict(self)


def search_signature():
    """Index.search's signature with every search option listed (help(), editors), from this
    schema: the method takes them as **options, checked once by QueryOptions."""
    import inspect

    P = inspect.Parameter
    params = [P("self", P.POSITIONAL_OR_KEYWORD), P("query", P.POSITIONAL_OR_KEYWORD, annotation="str"),
              P("k", P.POSITIONAL_OR_KEYWORD, default=10, annotation="int")]
    for f in fields(QueryOptions):
        if f.name != "k":
            default = f.default if f.default is not MISSING else f.default_factory()
            params.append(P(f.name, P.KEYWORD_ONLY, default=default, annotation=f.type))
    return inspect.Signature(params, return_annotation="SearchResult")


def names() -> list[str]:
    return [f.name for f in fields(QueryOptions)]


def spec(name: str) -> dict:
    return next(dict(f.metadata) for f in fields(QueryOptions) if f.name == name)


def server_fields() -> list:
    """The fields a server request takes."""
    return [f for f in fields(QueryOptions) if f.metadata.get("server") is True]


@dataclass
class SearchOptions:
    """A search's resolved settings. These field defaults are ldr's query defaults, the only
    place they are written: an index's manifest (`search`) records only what differs (set at
    build time or by `ldr tune`), a request only what it asks. Chosen on qmsum-train, synthetic
    passkey and needle (bench/README.md): min-max fusion with each kind's default weight (BM25 1,
    dense and sparse 0.25, colbert 0.5: `Component.default_weight`), the window stage over the
    fused top 50 at weight 0.4 (5-fold CV grouped by meeting, +3.1 nDCG@10 held out), no second
    stage (after the window stage the cross-encoder did not add: bench/sweeps/rerank_after_windows.py)
    and, when one is asked for, its score mixed at 0.15. A language's profile
    (ldr/language_defaults.py) sits between these and the index's own settings."""

    mode: str = HYBRID
    fusion: str = "minmax"
    weights: dict[str, float] | None = None    # None: each kind's default_weight
    rrf_k: int = 60
    depth: int = 1000              # per retriever
    window_weight: float = 0.4     # the best window's BM25 share of the top candidates' scores (0: off)
    window_depth: int = 50
    window_vectors: float = 0.0    # the vector kinds' share of the window evidence (0: the best window's BM25)
    window_scales: str = "passages"   # the BM25 evidence's windows: the vector kinds' passages, or TERMS:SHARE,...
    phrase_weight: float = 0.0     # the query's ordered term pairs' share of the window stage's score (0: off)
    aspect_weight: float = 0.0     # the query's sentences' best windows' share, after the phrases (0: off)
    rerank: str | None = None       # None | "passage" | a kind with exact scores (a cross-encoder: rerank_model)
    rerank_model: str | None = None
    rerank_depth: int = 100
    rerank_weight: float = 0.15    # the second stage's share of the final score (1: its score alone)
    rerank_windows: int | None = None   # windows per document a cross-encoder scores (None: its own setting)

    def check(self) -> None:
        """The index's defaults and the request, combined: names the schema cannot check alone."""
        if self.mode not in modes():
            raise ConfigError(f"unknown mode {self.mode!r}; choose one of {', '.join(modes())}")
        if self.fusion not in METHODS:
            raise ConfigError(f"unknown fusion {self.fusion!r}; choose one of {', '.join(METHODS)}")
        if self.weights:
            bad = set(self.weights) - set(registry.names())
            if bad:
                raise ConfigError(f"weights name unknown retrievers {sorted(bad)}; use {', '.join(registry.names())}")
        check_weights(self.weights)
        from .window_scales import parse
        parse(self.window_scales)
        for name in ("depth", "rerank_depth", "rrf_k", "window_depth", "window_weight", "window_vectors",
                     "rerank_weight", "phrase_weight", "aspect_weight"):
            if getattr(self, name) is None:
                raise QueryError(f"{name} must be set (got None)")


def ldr_default(name: str):
    """ldr's own default of a search setting (SearchOptions' field)."""
    f = next(f for f in fields(SearchOptions) if f.name == name)
    return f.default if f.default is not MISSING else f.default_factory()


def help_with_default(name: str) -> str:
    """A field's help with ldr's default appended from SearchOptions (never written by hand)."""
    text = spec(name)["help"]
    if name in {f.name for f in fields(SearchOptions)}:
        d = ldr_default(name)
        if d is not None and name != "mode":
            text += f" [ldr default: {d}]"
    return text


def gpu_second_stage(device: str | None, profile: dict | None) -> dict | None:
    """The second stage a search on this machine runs when nothing asks otherwise: on a CUDA
    device (`device`, or one present when None), the cross-encoder its language's profile measured
    as adding over the window stage ({"rerank_model", "rerank_depth", "rerank_windows",
    "rerank_weight"}: bench/sweeps/rerank_after_windows.py), when its package is installed; None on a CPU
    (seconds a query there), for a language where none was measured to add, or without a profile."""
    from ..encode.models import packaged_path

    stage = (profile or {}).get("gpu_second_stage")
    if not stage or str(device or "").startswith("cpu") or not (str(device or "").startswith("cuda") or _cuda()):
        return None
    return dict(stage) if packaged_path(stage["rerank_model"]) is not None else None


def _cuda() -> bool:
    global _CUDA
    if _CUDA is None:       # asked once per process: it may import torch
        from ..encode.runtime import cuda_present
        _CUDA = cuda_present()
    return _CUDA


_CUDA: bool | None = None


def index_defaults(recorded: dict, components: dict, profile: dict | None = None
                   ) -> tuple[SearchOptions, dict[str, str]]:
    """(the settings a search on this index starts from, where each came from: "index" for the
    manifest's `search` entry, "language <family>" for its language's profile
    (ldr/language_defaults.py), "kind" for a weight from a kind's default, "ldr" for
    SearchOptions). An index records its mode only when it chose one; else hybrid with several
    kinds, the kind alone with one. Passage rescoring recorded on an index without document vectors
    is dropped."""
    keys = {f.name for f in fields(SearchOptions)}
    opts, sources = SearchOptions(), {f.name: "ldr" for f in fields(SearchOptions)}
    layers = [(f"language {profile['family']}", profile["settings"])] if profile else []
    given: dict = {}
    for origin, values in layers + [("index", recorded)]:
        for key, v in values.items():
            if key == "weights":
                given.update({n: (float(w), origin) for n, w in (v or {}).items()})
            elif key in keys:
                setattr(opts, key, v)
                sources[key] = origin
    names = registry.in_order(components)
    if sources["mode"] == "ldr":
        opts.mode = HYBRID if len(names) > 1 else (names[0] if names else HYBRID)
        sources["mode"] = "index kinds"
    if opts.rerank == "passage" and not any(registry.get(n).passage_features for n in names):
        opts.rerank = None
    opts.weights = {n: given[n][0] if n in given else registry.get(n).default_weight for n in names}
    sources.update({f"weights.{n}": given[n][1] if n in given else "kind" for n in names})
    sources.pop("weights", None)
    opts.check()           # an index's recorded defaults obey the schema too
    QueryOptions.of(**{n: getattr(opts, n) for n in ("depth", "rerank_depth", "rrf_k", "rerank_windows",
                                                     "rerank_weight", "window_weight", "window_depth",
                                                     "window_vectors")})
    return opts, sources


def resolve(request: QueryOptions, recorded: dict, components: dict, device: str | None = None,
            profile: dict | None = None) -> tuple[SearchOptions, dict[str, str]]:
    """The request's fields over the index's defaults (`index_defaults`), and where each setting
    came from ("request", "index", "kind", "ldr", "gpu", "mode"). On a GPU (`device`, or a CUDA
    device when None) the packaged cross-encoder reranks a hybrid search nothing else reranks."""
    opts, sources = index_defaults(recorded, components, profile)
    r = request

    def take(name, value, why="request"):
        setattr(opts, name, value)
        sources[name] = why

    if r.mode is not None:
        take("mode", r.mode)
        if r.mode != HYBRID and r.rerank is None and r.rerank_model is None:
            take("rerank", None, "mode")      # a single retriever's own ranking, unless asked otherwise
        if r.mode != HYBRID and r.window_weight is None:
            take("window_weight", 0.0, "mode")
    for n, w in (r.weights or {}).items():   # partial weights change only the kinds they name
        if n not in registry.names():
            raise ConfigError(f"weights name unknown retrievers {[n]}; use {', '.join(registry.names())}")
        if n in opts.weights:
            opts.weights[n] = float(w)
            sources[f"weights.{n}"] = "request"
    for name in ("fusion", "depth", "rerank_depth", "rrf_k", "rerank_weight", "rerank_windows", "window_weight",
                 "window_depth", "window_vectors", "window_scales", "phrase_weight", "aspect_weight"):
        if getattr(r, name) is not None:
            take(name, getattr(r, name))
    # a cross-encoder: the request's; else, when nothing else reranks a hybrid search, the index's
    # or the GPU's default; a named second stage or a single kind's ranking runs none
    if r.rerank_model is not None:
        take("rerank_model", r.rerank_model)
    elif r.rerank is None and opts.rerank is None and opts.mode == HYBRID:
        if opts.rerank_model is None and (gpu := gpu_second_stage(device, profile)):
            for name, value in gpu.items():       # what the request or the index set stays
                if name == "rerank_model" or getattr(r, name, None) is None and sources[name] == "ldr":
                    take(name, value, "gpu")
    elif opts.rerank_model is not None:
        take("rerank_model", None, "request" if r.rerank is not None else sources["mode"])
    if r.rerank is False or r.rerank == "none":
        take("rerank", None)
    elif isinstance(r.rerank, str):
        take("rerank", r.rerank)
    opts.check()
    return opts, sources


def modes() -> tuple[str, ...]:
    """Every registered kind alone, or all of an index's kinds fused."""
    return registry.names() + (HYBRID,)
