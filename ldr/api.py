"""The Python API a RAG application embeds:

    import ldr
    ldr.Index.build("corpus/", "idx")          # or an iterable of ldr.Doc / dicts
    hits = ldr.open("idx").search("query", k=10)
"""
from __future__ import annotations

import dataclasses
import logging
import os
import threading
from pathlib import Path
from typing import Iterable

from .corpus import Doc, IngestReport, iter_corpus
from .errors import ConfigError, CorpusError, IndexFormatError, LdrError, QueryError
from .index.build import BuildConfig, build_index
from .index.docstore import Docstore
from .index.manifest import inside, read_manifest, verify_files
from .search.hits import Hit, SearchResult
from .search.pipeline import RETRIEVERS, SearchOptions, run_query, to_hits
from .search.query import prepare

log = logging.getLogger(__name__)


def _as_docs(items: Iterable) -> Iterable[Doc]:
    for i, item in enumerate(items):
        if isinstance(item, Doc):
            yield item
        elif isinstance(item, dict):
            doc_id = item.get("id", item.get("_id"))
            if doc_id is None or "text" not in item:
                raise CorpusError(f"document #{i} needs 'id' (or '_id') and 'text' keys; got {sorted(item)}")
            meta = {k: v for k, v in item.items() if k not in ("id", "_id", "text", "title")}
            yield Doc(str(doc_id), item["text"], item.get("title") or "", meta)
        else:
            raise CorpusError(f"document #{i} is a {type(item).__name__}; give ldr.Doc objects or dicts")


class Index:
    """An opened index directory. Components and models are loaded lazily on first use."""

    def __init__(self, path: str | os.PathLike, verify: bool = False, device: str | None = None,
                 trust_remote_code: bool = False):
        """Open an index. Always checked: the manifest's own checksum and shape, that every path
        stays inside the directory, every file's size, and the SHA-256 of files under 1 MB;
        `verify=True` hashes every file (as `ldr check` does, without its array checks).
        `trust_remote_code=True` lets models that ship their own code run: an index's manifest
        alone never grants that."""
        self.path = Path(path)
        self.manifest = read_manifest(self.path)
        verify_files(self.path, self.manifest, full=verify)
        self.docstore = Docstore(self.path, expected_rows=self.manifest["doc_count"])
        self.device = device
        self.trust_remote_code = trust_remote_code
        self._retrievers: dict = {}
        self._rerankers: dict = {}
        self._load_lock = threading.RLock()   # components load once, whichever thread asks first

    # -- building -------------------------------------------------------------------------
    @classmethod
    def build(cls, corpus: str | os.PathLike | Iterable, path: str | os.PathLike, *,
              config: BuildConfig | None = None, report: IngestReport | None = None,
              progress: bool = False, **options) -> "Index":
        """Build an index from a corpus path or an iterable of Docs/dicts, then open it.

        `options` are BuildConfig fields (bm25="lucene", dense=None, sparse=None, language="de",
        k1=..., b=..., search={...}). The ingestion report is available as `index.report`.
        """
        if config is not None and options:
            raise ConfigError("give either config= or keyword options, not both")
        config = config or BuildConfig(**options)
        report = report if report is not None else IngestReport()
        if isinstance(corpus, (str, os.PathLike)):
            # an output directory inside the corpus is not read as corpus
            docs = iter_corpus(corpus, report, max_doc_mb=config.max_doc_mb, exclude=[path])
        else:
            docs = _as_docs(corpus)
        build_index(docs, path, config, report, progress=progress)
        index = cls(path, verify=False)
        index.report = report
        return index

    # -- reading --------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.docstore)

    @property
    def components(self) -> dict:
        return self.manifest["components"]

    @property
    def retriever_names(self) -> list[str]:
        return [n for n in RETRIEVERS if n in self.components]

    def document(self, doc_id: str) -> Doc:
        if doc_id not in self.docstore:
            raise KeyError(doc_id)
        return self.docstore.doc(self.docstore.row(doc_id))

    def _model_settings(self, name: str, cls):
        """The encoder settings a component was built with; trust_remote_code only from the user."""
        comp = self.components[name]
        settings = dict(comp["model"]["settings"])
        wanted = bool(settings.pop("trust_remote_code", False))
        if wanted and not self.trust_remote_code:
            raise ConfigError(
                f"this index's {name} model ({comp['model'].get('name', '?')}) runs code that ships with the model "
                "(trust_remote_code). An index is data and cannot grant that by itself: if you trust that model, "
                "search with --trust-remote-code (API: ldr.open(path, trust_remote_code=True))")
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(settings) - fields)
        if unknown:  # settings schema: newer keys are ignored with a note, older indexes keep defaults
            log.warning("%s: ignoring unknown %s settings %s (written by a newer ldr?)",
                        self.path / "manifest.json", name, unknown)
            settings = {k: v for k, v in settings.items() if k in fields}
        if "trust_remote_code" in fields:
            settings["trust_remote_code"] = wanted
        return cls(**settings, device=self.device)

    def retriever(self, name: str):
        """The loaded first-stage retriever `name` (bm25 | dense | sparse)."""
        if name in self._retrievers:
            return self._retrievers[name]
        with self._load_lock:
            return self._load_retriever(name)

    def _load_retriever(self, name: str):
        if name not in self._retrievers:
            comp = self.components.get(name)
            if comp is None:
                have = ", ".join(self.retriever_names) or "none"
                raise ConfigError(f"this index has no {name!r} component (it has: {have})")
            where = inside(self.path, comp["path"], f"components.{name}.path")
            n_docs = self.manifest["doc_count"]
            try:
                if name == "bm25":
                    from .index.bm25.analysis import Analyzer
                    from .index.bm25.base import open_searcher
                    self._retrievers[name] = open_searcher(comp["backend"], where, Analyzer.from_dict(comp["analyzer"]),
                                                           comp["k1"], comp["b"], n_docs)
                elif name == "dense":
                    from .encode.dense import DenseEncoder, DenseSettings
                    from .index.dense import DenseSearcher
                    settings = self._model_settings(name, DenseSettings)
                    searcher = DenseSearcher(where, comp, None, n_docs)   # index files first: cheap checks
                    searcher.encoder = DenseEncoder(settings)
                    self._retrievers[name] = searcher
                elif name == "sparse":
                    from .encode.sparse import SparseEncoder, SparseSettings
                    from .index.sparse import SparseSearcher
                    settings = self._model_settings(name, SparseSettings)
                    searcher = SparseSearcher(where, None, n_docs)
                    searcher.encoder = SparseEncoder(settings)
                    self._retrievers[name] = searcher
            except LdrError:
                raise
            except Exception as e:  # a damaged file surfaces as whatever its reader raises
                raise IndexFormatError(
                    f"the {name} component of {self.path} ({where}) cannot be loaded: {type(e).__name__}: "
                    f"{str(e)[:300]}. Run `ldr check {self.path}`; rebuild the index with `ldr index`") from None
        return self._retrievers[name]

    def reranker(self, name: str | None, model: str | None = None, weights: dict | None = None):
        """None, the offline passage rescorer, or a cross-encoder (`model`: any HF classifier)."""
        if model:
            with self._load_lock:
                if model not in self._rerankers:
                    from .rerank.cross_encoder import CrossEncoderReranker, CrossEncoderSettings
                    self._rerankers[model] = CrossEncoderReranker(CrossEncoderSettings(
                        model=model, device=self.device, trust_remote_code=self.trust_remote_code))
            return self._rerankers[model]
        if name in (None, "none"):
            return None
        if name == "passage":
            from .rerank.passage import PassageRescorer
            return PassageRescorer(weights or self.search_defaults().get("weights"))
        raise ConfigError(f"unknown reranker {name!r}; use passage, none, or --rerank-model MODEL")

    def search_defaults(self) -> dict:
        """Query-time defaults recorded at build time (fusion method and weights, reranker)."""
        from .search.defaults import DEFAULT_SEARCH

        d = {**DEFAULT_SEARCH, **self.manifest.get("search", {})}
        names = self.retriever_names
        d.setdefault("mode", "hybrid" if len(names) > 1 else names[0])
        if d.get("rerank") == "passage" and not ({"dense", "sparse"} & set(names)):
            d["rerank"] = None  # passage rescoring needs dense or sparse document vectors
        return d

    def default_mode(self) -> str:
        return self.search_defaults()["mode"]

    def search(self, query: str, k: int = 10, *, mode: str | None = None, fusion: str | None = None,
               weights: dict[str, float] | None = None, rerank: bool | str | None = None,
               rerank_model: str | None = None, depth: int | None = None, rerank_depth: int | None = None,
               with_text: bool = True) -> SearchResult:
        """Top-k documents for `query`, best first; every hit carries each stage's score.

        By default: every retriever of the index, fused, then the top candidates reranked, as
        recorded in the manifest. `rerank=False` skips reranking; `rerank_model=` uses a
        cross-encoder.
        """
        query = prepare(query)
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise QueryError(f"k must be a whole number of at least 1 (got {k!r})")
        k = min(k, max(len(self), 1))  # more hits than documents cannot be returned
        d = self.search_defaults()
        fields = {f.name for f in dataclasses.fields(SearchOptions)}
        opts = SearchOptions(**{key: v for key, v in d.items() if key in fields})
        if mode is not None:
            opts.mode = mode
            if mode != "hybrid" and rerank is None and rerank_model is None:
                opts.rerank = None  # a single retriever's own ranking, unless asked otherwise
        if fusion is not None:
            opts.fusion = fusion
        if weights is not None:
            # partial weights change only the retrievers they name; the others keep the index's
            # defaults (equal weights when the index has none)
            base = opts.weights or {n: 1.0 for n in RETRIEVERS}
            opts.weights = {**base, **weights}
        if depth is not None:
            opts.depth = depth
        if rerank_depth is not None:
            opts.rerank_depth = rerank_depth
        opts.check()
        opts.depth, opts.rerank_depth = min(opts.depth, max(len(self), 1)), min(opts.rerank_depth, max(len(self), 1))
        if rerank is False:
            opts.rerank = None
        elif isinstance(rerank, str):
            opts.rerank = rerank
        names = [n for n in RETRIEVERS if n in self.components] if opts.mode == "hybrid" else [opts.mode]
        retrievers = {n: self.retriever(n) for n in names}
        reranker = self.reranker(opts.rerank, rerank_model, opts.weights) if (opts.rerank or rerank_model) else None
        rows, ctx = run_query(query, k, retrievers, opts, reranker, self.docstore.text, self.docstore.id_rank)
        hits = to_hits(rows, self.docstore.ids, self.docstore.titles)
        if with_text:
            for h in hits:
                h.text = self.docstore.text(h.docno)
        return SearchResult(hits, query, ctx.timings, getattr(reranker, "name", None), ctx)

    def info(self) -> dict:
        size = sum(f["size"] for f in self.manifest.get("files", {}).values())
        m = self.manifest
        return {"path": str(self.path), "documents": m["doc_count"], "bytes": size,
                "created": m.get("created", "?"), "ldr_version": m.get("ldr_version", "?"),
                "format_version": m["format_version"], "components": self.components,
                "search": self.search_defaults(), "ingest": self.manifest.get("ingest", {})}


def open(path: str | os.PathLike, verify: bool = False, device: str | None = None,  # noqa: A001
         trust_remote_code: bool = False) -> Index:
    """Open an index directory (cheap checks; `verify=True` also hashes every file). See Index."""
    return Index(path, verify=verify, device=device, trust_remote_code=trust_remote_code)
