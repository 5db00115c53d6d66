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
    depth: int | None = _opt(None, "Candidates per retriever (default 1000).", ge=1, le=100_000, cli=("--depth",))
    window_weight: float | None = _opt(None, "Share (0-1) of each top candidate's best-window BM25 in its score, "
                                             "mixed with the first stage's (0: off; default 0.4).", ge=0, le=1,
                                       cli=("--window-weight",))
    window_depth: int | None = _opt(None, "First-stage candidates rescored by their best window (default 50).",
                                    ge=1, le=1000, cli=("--window-depth",))
    rerank: bool | str | None = _opt(None, "Second stage: passage, none (False) or the index's (None).",
                                     cli=("--rerank",))
    rerank_model: str | None = _opt(None, "Cross-encoder for the second stage (any HF sequence-classification "
                                          "model or folder).", cli=("--rerank-model",),
                                    server="a server loads no model a request names (the index's reranker serves)")
    rerank_depth: int | None = _opt(None, "Candidates reranked (default 100).", ge=1, cli=("--rerank-depth",))
    rerank_weight: float | None = _opt(None, "The reranker's share (0-1) of the final score, mixed with the first "
                                             "stage's (1: the reranker's score alone).", ge=0, le=1,
                                       cli=("--rerank-weight",))
    rerank_windows: int | None = _opt(None, "Best passages per document a cross-encoder scores (default 8; fewer "
                                            "is faster on a CPU).", ge=1, le=64, cli=("--rerank-windows",))
    filters: dict[str, Any] | None = _opt(None, "Metadata filters applied before fusion, e.g. lang=de, "
                                                "'path=contracts/*', year>=2020.", cli=("--filter",))
    passages: int = _opt(0, "Best passages per hit (character offsets into the text).", ge=0,
                         cli=("-p", "--passages"), server_default=1)
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


def names() -> list[str]:
    return [f.name for f in fields(QueryOptions)]


def spec(name: str) -> dict:
    return next(dict(f.metadata) for f in fields(QueryOptions) if f.name == name)


def server_fields() -> list:
    """The fields a server request takes."""
    return [f for f in fields(QueryOptions) if f.metadata.get("server") is True]


# the second stage a GPU runs by default (issue 30: "on a GPU, top-100 should be the default"):
# the packaged cross-encoder over the top rerank_depth (100), mixed at rerank_weight. Not measured
# on a GPU here (none was lent); on 2 CPU cores it costs seconds a query, so a CPU leaves it off.
GPU_RERANKER = "ms-marco-minilm-l12"


def gpu_reranker(device: str | None) -> str | None:
    """The cross-encoder a search on this machine runs when nothing asks otherwise: GPU_RERANKER
    where a CUDA device will run it (and its package is installed), None on a CPU."""
    from ..encode.models import packaged_path

    if str(device or "").startswith("cpu") or not (str(device or "").startswith("cuda") or _cuda()):
        return None
    return GPU_RERANKER if packaged_path(GPU_RERANKER) is not None else None


def _cuda() -> bool:
    global _CUDA
    if _CUDA is None:       # asked once per process: it may import torch
        from ..encode.runtime import cuda_present
        _CUDA = cuda_present()
    return _CUDA


_CUDA: bool | None = None


def resolve(request: QueryOptions, defaults: dict, device: str | None = None):
    """(the pipeline's SearchOptions, the cross-encoder to use or None): the request's fields
    over the index's defaults (its manifest's `search` entry with ldr's own under it); on a GPU
    (`device`, or a CUDA device when None) the packaged cross-encoder when nothing else is set."""
    from dataclasses import fields as _fields

    keys = {f.name for f in _fields(SearchOptions)}
    opts = SearchOptions(**{key: v for key, v in defaults.items() if key in keys})
    r = request
    rerank_model = r.rerank_model
    if r.mode is not None:
        opts.mode = r.mode
        if r.mode != "hybrid" and r.rerank is None and rerank_model is None:
            opts.rerank = None  # a single retriever's own ranking, unless asked otherwise
        if r.mode != "hybrid" and r.window_weight is None:
            opts.window_weight = 0.0
    if r.weights is not None:
        # partial weights change only the retrievers they name; the others keep the index's
        # defaults (equal weights when the index has none)
        base = opts.weights or {n: 1.0 for n in registry.names()}
        opts.weights = {**base, **r.weights}
    for name in ("fusion", "depth", "rerank_depth", "rrf_k", "rerank_weight", "rerank_windows", "window_weight",
                 "window_depth"):
        if getattr(r, name) is not None:
            setattr(opts, name, getattr(r, name))
    if rerank_model is None and r.rerank is None and opts.rerank is None and opts.mode == "hybrid":
        # a cross-encoder recorded as the index's reranker, else the GPU's default second stage
        rerank_model = defaults.get("rerank_model") or gpu_reranker(device)
    opts.check()
    if r.rerank is False or r.rerank == "none":
        opts.rerank = None
    elif isinstance(r.rerank, str):
        opts.rerank = r.rerank
    return opts, rerank_model


def modes() -> tuple[str, ...]:
    """Every registered kind alone, or all of an index's kinds fused."""
    return registry.names() + ("hybrid",)


@dataclass
class SearchOptions:
    mode: str = "hybrid"
    fusion: str = "minmax"
    weights: dict[str, float] | None = None
    rrf_k: int = 60
    depth: int = 1000              # per retriever
    # an index whose manifest predates the window stage gets it too: it needs nothing stored
    window_weight: float = 0.4     # the best window's BM25 share of the top candidates' scores (0: off)
    window_depth: int = 50
    rerank: str | None = None       # None | "passage" (a cross-encoder is passed as a model)
    rerank_depth: int = 100
    rerank_weight: float = 0.15    # the second stage's share of the final score (1: its score alone)
    rerank_windows: int | None = None   # windows per document a cross-encoder scores (None: its own setting)

    def check(self) -> None:
        if self.mode not in modes():
            raise ConfigError(f"unknown mode {self.mode!r}; choose one of {', '.join(modes())}")
        if self.fusion not in METHODS:
            raise ConfigError(f"unknown fusion {self.fusion!r}; choose one of {', '.join(METHODS)}")
        if self.weights:
            bad = set(self.weights) - set(registry.names())
            if bad:
                raise ConfigError(f"weights name unknown retrievers {sorted(bad)}; use {', '.join(registry.names())}")
        check_weights(self.weights)
        # types and bounds are the schema's, for the index's defaults too
        QueryOptions.of(**{n: getattr(self, n) for n in ("depth", "rerank_depth", "rrf_k", "rerank_windows",
                                                         "rerank_weight", "window_weight", "window_depth")})
        for name in ("depth", "rerank_depth", "rrf_k", "window_depth", "window_weight"):  # resolved: never None
            if getattr(self, name) is None:
                raise QueryError(f"{name} must be set (got None)")
