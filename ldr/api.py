"""The Python API a RAG application embeds:

    import ldr
    ldr.Index.build("corpus/", "idx")          # or an iterable of ldr.Doc / dicts
    hits = ldr.open("idx").search("query", k=10)
"""
from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import Iterable

from .corpus import DEFAULT_MAX_DOC_MB, Doc, IngestReport, corpus_docs
from .encode.runtime import for_queries
from .errors import ConfigError, IndexFormatError, LdrError, QueryError
from .index.build import BuildConfig, build_index
from .index.view import View, newest, open_view
from .index.ray_build import RayOptions, ray_options
from .search.hits import Hit, SearchResult, origin  # noqa: F401  (ldr.api.Hit)
from . import components as registry
from .search.options import QueryOptions, search_signature
from .search.query import prepare

log = logging.getLogger(__name__)


class Index:
    """An opened index, pinned to one generation (consistent across every component) until
    `refresh()`. Components and models are loaded lazily on first use; one Index can be searched
    from many threads."""

    def __init__(self, path: str | os.PathLike, verify: bool = False, device: str | None = None,
                 trust_remote_code: bool = False, generation: int | None = None):
        """Open an index at its newest generation (or `generation`). Always checked: the manifest's
        own checksum and shape, that every path stays inside the directory, every file's size,
        and the SHA-256 of files under 1 MB; `verify=True` hashes every file (as `ldr check` does,
        without its array checks). `trust_remote_code=True` lets models that ship their own code
        run: an index's manifest alone never grants that."""
        self.path = Path(path)
        self.device = device
        self.trust_remote_code = trust_remote_code
        self.verify = verify
        self._rerankers: dict = {}
        self._window_terms: dict = {}   # analysed passage windows by uid, per analyzer (ldr/search/passages.py)
        self._load_lock = threading.RLock()   # components load once, whichever thread asks first
        self._view = self._open_view(generation)

    def _open_view(self, generation: int | None = None) -> View:
        return open_view(self.path, generation, full=self.verify)

    # -- generations ------------------------------------------------------------------------
    @property
    def manifest(self) -> dict:
        return self._view.manifest

    @property
    def docstore(self):
        return self._view.segments

    @property
    def generation(self) -> int:
        """The generation this handle reads (0: a format 2 index)."""
        return self._view.generation

    def refresh(self) -> bool:
        """Move to the newest committed generation; True when it changed. Searches already running
        finish on the generation they started with."""
        if newest(self.path) in (None, self.generation):
            return False
        view = self._open_view()
        with self._load_lock:
            self._view = view
        return True

    def close(self) -> None:
        """Release this handle's generation (the garbage collector may then remove its files)."""
        self._view.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- building and writing ----------------------------------------------------------------
    @classmethod
    def build(cls, corpus: str | os.PathLike | Iterable, path: str | os.PathLike, *,
              config: BuildConfig | None = None, report: IngestReport | None = None,
              progress: bool = False, wait: bool | float = False, ray: "RayOptions | bool | None" = None,
              **options) -> "Index":
        """Build an index from a corpus path or an iterable of Docs/dicts, then open it. On an
        existing index this commits a new generation holding only this corpus. `ray`: encode on a
        Ray cluster (True: a local one; RayOptions(address=...) for a running cluster).

        `options` are BuildConfig fields (bm25="lucene", dense=None, sparse=None, language="de",
        k1=..., b=..., search={...}). The ingestion report is available as `index.report`.
        """
        if config is not None and options:
            raise ConfigError("give either config= or keyword options, not both")
        config = config or BuildConfig(**options)
        report = report if report is not None else IngestReport()
        docs = corpus_docs(corpus, report, config.max_doc_mb, path)
        build_index(docs, path, config, report, progress=progress, wait=wait, ray=ray_options(ray))
        index = cls(path, verify=False)
        index.report = report
        return index

    def _writer(self, wait):
        from .index.writer import IndexWriter
        return IndexWriter(self.path, wait=wait, trust_remote_code=self.trust_remote_code, device=self.device)

    def add(self, docs: str | os.PathLike | Iterable, *, wait: bool | float = False, progress: bool = False,
            report: IngestReport | None = None, max_doc_mb: float = DEFAULT_MAX_DOC_MB, auto_merge: bool = True,
            ray: "RayOptions | bool | None" = None) -> dict:
        """Encode only these documents (a corpus path or Docs/dicts) into a new segment and commit;
        an id already in the index replaces its old copy. Returns {added, replaced (ids), skipped,
        generation}; this handle then reads the new generation. `ray`: as in `build`."""
        report = report if report is not None else IngestReport()
        with self._writer(wait) as w:
            result = w.add(corpus_docs(docs, report, max_doc_mb, self.path), report, progress=progress,
                           max_doc_mb=max_doc_mb, auto_merge=auto_merge, ray=ray_options(ray))
        result["report"] = report
        self.refresh()
        return result

    def delete(self, ids: Iterable[str], *, wait: bool | float = False) -> dict:
        """Delete documents by id and commit. Returns {deleted (ids), missing (ids), generation}."""
        if isinstance(ids, str):
            ids = [ids]
        with self._writer(wait) as w:
            result = w.delete(ids)
        self.refresh()
        return result

    def merge(self, max_segments: int = 1, *, wait: bool | float = False) -> dict:
        """Merge segments (deleted documents dropped, nothing re-encoded) and commit."""
        with self._writer(wait) as w:
            result = w.merge(max_segments)
        self.refresh()
        return result

    def set_search_defaults(self, search: dict, record: dict | None = None, *, wait: bool | float = False) -> dict:
        """Commit new query-time defaults (the manifest's `search` entry, as `ldr tune` writes it)
        as a new generation; `record` goes into the history. Returns the new manifest."""
        with self._writer(wait) as w:
            m = w.set_search_defaults(search, record or {})
        self.refresh()
        return m

    # -- reading --------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._view.segments)

    @property
    def components(self) -> dict:
        return self.manifest["components"]

    @property
    def retriever_names(self) -> list[str]:
        return registry.in_order(self.components)

    def document(self, doc_id: str) -> Doc:
        store = self._view.segments
        if doc_id not in store:
            raise KeyError(doc_id)
        return store.doc(store.row(doc_id))

    def _encoder(self, name: str, comp: dict):
        """A zero-argument loader of the kind's encoder (None: no model); encoders are shared by
        every generation, reader and writer of this process built with the same settings."""
        settings = registry.get(name).encoder_settings(comp, self.trust_remote_code, self.device, str(self.path))
        return registry.lazy_encoder(name, for_queries(settings))

    def retriever(self, name: str, view: View | None = None):
        """The loaded first-stage retriever `name` (bm25 | dense | sparse) of this generation."""
        view = view or self._view
        if name in view.retrievers:
            return view.retrievers[name]
        with self._load_lock:
            if name not in view.retrievers:
                view.retrievers[name] = self._load_retriever(name, view)
        return view.retrievers[name]

    def _load_retriever(self, name: str, view: View):
        comp = view.manifest["components"].get(name)
        if comp is None:
            have = ", ".join(registry.in_order(view.manifest["components"])) or "none"
            raise ConfigError(f"this index has no {name!r} component (it has: {have})")
        try:
            from .components.states import ReadState

            return registry.get(name).open(ReadState(self.path, name, comp, view.segments, self._encoder(name, comp)))
        except LdrError:
            raise
        except BaseException as e:  # a damaged file surfaces as whatever its reader raises (tantivy: a panic)
            if not isinstance(e, Exception) and type(e).__name__ != "PanicException":
                raise
            where = comp.get("path") or "its segment parts"
            raise IndexFormatError(
                f"the {name} component of {self.path} ({where}) cannot be loaded: {type(e).__name__}: "
                f"{str(e)[:300]}. Run `ldr check {self.path}`; rebuild the index with `ldr index`") from None

    def cross_encoder(self, model: str):
        """The cross-encoder `model` (any HF classifier, a packaged name or a folder), loaded once
        per Index."""
        with self._load_lock:
            if model not in self._rerankers:
                from .rerank.cross_encoder import CrossEncoderReranker, CrossEncoderSettings
                self._rerankers[model] = CrossEncoderReranker(CrossEncoderSettings(
                    model=model, device=self.device, trust_remote_code=self.trust_remote_code))
        return self._rerankers[model]

    def reranker(self, opts, searched: list[str], view: View | None = None):
        """The second stage resolved settings (SearchOptions) ask for: a cross-encoder
        (`rerank_model`), or a named one (passage, a kind's exact scores); None for none."""
        view = view or self._view
        if opts.rerank_model:
            return self.cross_encoder(opts.rerank_model)
        if opts.rerank in (None, "none"):
            return None
        from .rerank.late import named_reranker
        from .rerank.passage import PassageRescorer

        if opts.rerank == "passage":
            return PassageRescorer(opts.weights, {n: self.retriever(n, view) for n in searched})
        return named_reranker(opts.rerank, opts.weights, view.manifest["components"],
                              lambda n: self.retriever(n, view))

    def search_defaults(self, view: View | None = None) -> dict:
        """The settings a search on this index starts from: ldr's defaults (search/options.py),
        under what the manifest records (build time, `ldr tune`)."""
        from dataclasses import asdict

        from .language_defaults import of_manifest
        from .search.options import index_defaults

        manifest = (view or self._view).manifest
        return asdict(index_defaults(manifest.get("search", {}), manifest["components"], of_manifest(manifest))[0])

    def default_mode(self) -> str:
        return self.search_defaults()["mode"]

    def search(self, query: str, k: int = 10, **options) -> SearchResult:
        """Top-k documents for `query`, best first; every hit carries each stage's score.

        `options` are the fields of ldr.search.options.QueryOptions (one schema for the API, the
        CLI, the server and the RAG adapters); None keeps the index's default:
        mode, fusion, weights, rrf_k, depth: the first stage (every retriever of the index, fused,
        as recorded in the manifest); `filters` ({"lang": "de", "path": "contracts/*"}, see
        ldr/search/filters.py) restrict every retriever before fusion.
        window_weight, window_depth: the top candidates rescored by their best window's BM25.
        rerank (False skips it, "passage"), rerank_model (a cross-encoder), rerank_depth,
        rerank_weight (0–1: the reranker's share of the final score, z-normalised mix with the
        stage before), rerank_windows (best passages per document a cross-encoder scores).
        stages: registered extra stages ({name: {setting: value}}).
        passages=N gives each hit its N best passages (character offsets into its text); a hit's
        full text is read only with with_text=True. `plan(query, ...)` shows what runs.
        """
        return self._search(prepare(query), QueryOptions.of(k=k, **options), t0=time.perf_counter())

    def plan(self, query: str, k: int = 10, **options):
        """The plan `search(query, k, **options)` would run (ldr/search/plan.py): print it with
        `.explain()`."""
        view = self._view
        return self._compile(prepare(query), QueryOptions.of(k=k, **options), view, self._mask(view, options.get("filters")))

    def search_many(self, queries, k: int = 10, *, batch_size: int = 32, progress=None, **options):
        """Search many queries ({qid: text} or [(qid, text)]), yielding (qid, SearchResult or the
        QueryError that query raised) in order. Queries are encoded in batches: a run of 1,000
        queries takes a fraction of 1,000 `search` calls. `options` as for `search`."""
        items = list(queries.items()) if isinstance(queries, dict) else list(queries)
        request = QueryOptions.of(k=k, **options)
        view = self._view
        allow = self._mask(view, request.filters)
        try:
            # the kinds every query of the batch searches (one plan's: they differ only in text)
            kinds = self._compile("batch", request, view, allow).kinds if allow is None or allow.any() else []
        except QueryError:
            kinds = []
        for i in range(0, len(items), batch_size):
            chunk, ready = items[i:i + batch_size], []
            for qid, text in chunk:
                try:
                    ready.append((qid, prepare(text), None))
                except QueryError as e:
                    ready.append((qid, None, e))
            texts = [t for _, t, e in ready if e is None]
            reps = [{} for _ in texts]
            for n in kinds:
                r = self.retriever(n, view)
                if hasattr(r, "encode_many"):
                    for j, rep in enumerate(r.encode_many(texts)):
                        reps[j][n] = rep
            j = 0
            for qid, text, err in ready:
                if err is not None:
                    yield qid, err
                else:
                    try:
                        yield qid, self._search(text, request, t0=time.perf_counter(), view=view, reps=reps[j],
                                                allow=allow)
                    except QueryError as e:
                        yield qid, e
                    j += 1
                if progress is not None:
                    progress(1)

    def filter_mask(self, filters):
        """The filters' mask over this handle's document numbers (None: no filter)."""
        return self._mask(self._view, filters)

    def _mask(self, view: View, filters):
        """The filters' mask over this generation's docnos (None: no filter)."""
        from .search import filters as _filters

        conds = _filters.normalise(filters)
        store = view.segments
        return store.cached_mask(_filters.key(conds), lambda s: _filters.mask(conds, s)) if conds else None

    def _compile(self, query: str, request: QueryOptions, view: View, allow):
        from .language_defaults import of_manifest
        from .search.passages import term_kind
        from .search.plan import compile_plan

        n_docs = int(allow.sum()) if allow is not None else len(view.segments)
        components = view.manifest["components"]
        return compile_plan(query, request, view.manifest.get("search", {}), components, max(n_docs, 1),
                            device=self.device, filtered=allow is not None,
                            reranker=lambda opts, kinds: self.reranker(opts, kinds, view),
                            term_kind=lambda: term_kind(components), profile=of_manifest(view.manifest))

    def _finder(self, view: View, weights: dict | None, kinds: list[str]):
        """Locates passages in this generation's documents (ldr/search/passages.py)."""
        from .search.passages import finder_for
        return finder_for(view.manifest["components"], weights, {n: self.retriever(n, view) for n in kinds},
                          self._window_terms, self._load_lock)

    def _search(self, query: str, request: QueryOptions, *, t0: float | None = None, view: View | None = None,
                reps: dict | None = None, allow=False) -> SearchResult:
        from .search.hits import to_hits
        from .search.source import IndexSource

        view = view or self._view   # the whole search reads this one generation, whatever refresh() does
        store = view.segments
        allow = self._mask(view, request.filters) if allow is False else allow
        n_docs = int(allow.sum()) if allow is not None else len(store)
        plan = self._compile(query, request, view, allow)
        if n_docs == 0:   # nothing passes the filters (or an empty index)
            (empty := SearchResult([], query, {}, None, None, plan)).generation = view.generation
            return empty
        o = plan.settings
        wants = request.passages or o.rerank_model or o.window_weight
        finder = self._finder(view, o.weights, plan.kinds) if wants else None
        source = IndexSource(query, lambda n: self.retriever(n, view), store, allow, finder, reps)
        cands = plan.run(source)
        hits = to_hits(cands.rows, store.ids, store.titles)
        for h in hits:
            h.passages = cands.passages.get(h.docno, [])
        docnos = [h.docno for h in hits]
        source.prefetch(docnos if request.with_text else [])
        metas = store.doc_metas(docnos) if request.with_meta else {}
        for h in hits:
            h.text = source.text(h.docno) if request.with_text else h.text
            h.meta, h.origin = (metas[h.docno].meta, origin(metas[h.docno])) if request.with_meta else (h.meta, h.origin)
        source.release()    # the result keeps its candidates' scores, not 50 candidates' texts
        second = plan.stage("reranked")
        result = SearchResult(hits, query, {n: round(1e3 * t, 2) for n, t in cands.timings.items()},
                              second.reranker.name if second else None, cands, plan,
                              round(1e3 * (time.perf_counter() - t0), 2) if t0 is not None else None)
        result.finder = finder
        result.generation = view.generation
        return result

    def info(self) -> dict:
        """What `ldr info` shows: counts, sizes, segments, each component described by its kind."""
        from .index.manifest import describe
        from .language_defaults import of_manifest

        return {"path": str(self.path), **describe(self.manifest), "search": self.search_defaults(),
                "search_recorded": dict(self.manifest.get("search", {})),
                "search_profile": of_manifest(self.manifest)}


Index.search.__signature__ = search_signature()   # help() and editors list every option


def open(path: str | os.PathLike, verify: bool = False, device: str | None = None,  # noqa: A001
         trust_remote_code: bool = False, generation: int | None = None) -> Index:
    """Open an index directory at its newest generation (cheap checks; `verify=True` also hashes
    every file). See Index."""
    return Index(path, verify=verify, device=device, trust_remote_code=trust_remote_code, generation=generation)
