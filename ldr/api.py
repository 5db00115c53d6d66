"""The Python API a RAG application embeds:

    import ldr
    ldr.Index.build("corpus/", "idx")          # or an iterable of ldr.Doc / dicts
    hits = ldr.open("idx").search("query", k=10)
"""
from __future__ import annotations

import itertools
import logging
import os
from pathlib import Path
from typing import Iterable

from .corpus import Doc, IngestReport, corpus_docs
from .errors import ConfigError, IndexFormatError, LdrError
from .handle import Handle
from .shard import LocalShard
from .index.build import BuildConfig, build_index, create_index
from .index.view import View, holds_index, newest, open_view
from .index.ray_build import RayOptions, ray_options
from .search.hits import Hit, SearchResult, origin  # noqa: F401  (ldr.api.Hit)
from .search.searcher import Snapshot
from . import components as registry
from .search.options import search_signature

_NONE = object()

log = logging.getLogger(__name__)


class Index(Handle):
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
        self._init_shared()
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
        self._retain(view.segments)
        return True

    def _retain(self, segments) -> None:
        """The caches by uid (analysed windows, recent texts) keep only the documents this
        generation holds: their memory follows the live index, not its history."""
        import numpy as np

        def alive(uids):
            docnos = segments.docnos_of_uids(uids)
            if not len(segments.live):        # every document deleted: nothing is alive
                return np.zeros(len(docnos), dtype=bool)
            return (docnos >= 0) & segments.live[np.maximum(docnos, 0)]
        for cache in [self._texts, *list(self._window_terms.values())]:
            cache.retain(alive)

    def close(self) -> None:
        """Release this handle's generation (the garbage collector may then remove its files)."""
        self._view.close()
        self._close_pool()

    def as_shard(self) -> LocalShard:
        """This handle's generation as one shard of a search (a sharded index's, a replica's)."""
        return LocalShard(self, self._view)

    def _snapshot(self, view: View | None = None) -> Snapshot:
        """This handle's generation as the point in time of one search: a 1-shard cluster."""
        view = view or self._view
        return Snapshot(view.generation, view.manifest, [LocalShard(self, view)], self._sides(view.manifest))

    # -- building and writing ----------------------------------------------------------------
    @classmethod
    def build(cls, corpus: str | os.PathLike | Iterable, path: str | os.PathLike, *,
              config: BuildConfig | None = None, report: IngestReport | None = None,
              progress: bool = False, wait: bool | float = False, ray: "RayOptions | bool | None" = None,
              overwrite: bool = False, **options) -> "Index":
        """Build an index from a corpus path or an iterable of Docs/dicts, then open it. `path` must
        not hold an index, unless `overwrite=True`: then a new generation holds only this corpus
        (as `ldr index --overwrite`; `index.add(...)` adds to one instead). `ray`: encode on a Ray
        cluster (True: a local one; RayOptions(address=...) for a running cluster).

        `options` are BuildConfig fields (bm25="lucene", dense=None, sparse=None, language="de",
        k1=..., b=..., search={...}). The ingestion report is available as `index.report`.
        """
        if config is not None and options:
            raise ConfigError("give either config= or keyword options, not both")
        config = config or BuildConfig(**options)
        if not isinstance(corpus, (str, os.PathLike)) and not overwrite:
            it = iter(corpus)
            first = next(it, _NONE)
            if first is _NONE:            # no documents yet: an empty index that `add` fills
                return cls.create(path, config=config, wait=wait)
            corpus = itertools.chain([first], it)
        if not overwrite and holds_index(Path(path)):
            raise ConfigError(f"{path} is an index already: `ldr.open({str(path)!r}).add(...)` adds documents to it "
                              "(replacing those with the same ids); `overwrite=True` replaces the whole index")
        report = report if report is not None else IngestReport()
        docs = corpus_docs(corpus, report, config.max_doc_mb, path, config.doc_timeout)
        build_index(docs, path, config, report, progress=progress, wait=wait, ray=ray_options(ray))
        index = cls(path, verify=False)
        index.report = report
        return index

    @classmethod
    def create(cls, path: str | os.PathLike, *, config: BuildConfig | None = None, wait: bool | float = False,
               **options) -> "Index":
        """An empty index in the new directory `path`, with the components and models these build
        options choose (as `build` takes them); documents come with `add`. `language` as given, else
        English (there is no text to detect it from). `Index.build([], path)` is the same."""
        if config is not None and options:
            raise ConfigError("give either config= or keyword options, not both")
        if holds_index(Path(path)):
            raise ConfigError(f"{path} is an index already: open it with `ldr.open({str(path)!r})`")
        create_index(path, config or BuildConfig(**options), wait=wait)
        index = cls(path, verify=False)
        index.report = IngestReport()
        return index

    def _writer(self, wait):
        from .index.writer import IndexWriter
        return IndexWriter(self.path, wait=wait, trust_remote_code=self.trust_remote_code, device=self.device)

    # -- reading --------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._view.segments)

    def document(self, doc_id: str) -> Doc:
        store = self._view.segments
        if doc_id not in store:
            raise KeyError(doc_id)
        return store.doc(store.row(doc_id))

    def retriever(self, name: str, view: View | None = None):
        """The loaded first-stage reader `name` (bm25 | dense | sparse | colbert) of this generation:
        its files, no model (`query_side(name)` encodes queries for it)."""
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

            return registry.get(name).open(ReadState(self.path, name, comp, view.segments))
        except LdrError:
            raise
        except BaseException as e:  # a damaged file surfaces as whatever its reader raises (tantivy: a panic)
            if not isinstance(e, Exception) and type(e).__name__ != "PanicException":
                raise
            where = comp.get("path") or "its segment parts"
            raise IndexFormatError(
                f"the {name} component of {self.path} ({where}) cannot be loaded: {type(e).__name__}: "
                f"{str(e)[:300]}. Run `ldr check {self.path}`; rebuild the index with `ldr index`") from None

    def live_ids(self) -> list[str]:
        """The id of every document of this generation."""
        return self.docstore.live_ids()

    def ids_where(self, filters: dict) -> list[str]:
        """The ids of this generation's documents that pass `filters` (ldr's filter dict): what a
        framework's delete by a metadata value (LlamaIndex's `delete_ref_doc`) removes."""
        import numpy as np

        mask = self.filter_mask(filters)
        segments = self._view.segments
        if mask is None:
            return self.live_ids()
        return [segments.ids[d] for d in np.flatnonzero(mask & segments.live).tolist()]

    def filter_mask(self, filters):
        """The filters' mask over this handle's document numbers (None: no filter)."""
        return LocalShard(self, self._view).mask(self._snapshot().conditions(filters) or None)

    def info(self) -> dict:
        """What `ldr info` shows: counts, sizes, segments, each component described by its kind."""
        from .index.manifest import describe
        from .language_defaults import of_manifest

        return {"path": str(self.path), **describe(self.manifest), "search": self.search_defaults(),
                "search_recorded": dict(self.manifest.get("search", {})),
                "search_profile": of_manifest(self.manifest), "relevance": relevance_fit(self.manifest)}


def relevance_fit(manifest: dict) -> dict | None:
    """Which calibrated-relevance fit a default search of this index uses, and on what data it was
    fitted and checked (search/calibration.py); None where none applies (no --min-score)."""
    from .search import calibration

    comps = manifest["components"]
    kinds = registry.in_order(comps)
    fit, query_fit = calibration.fit_for(comps, kinds), calibration.query_fit_for(comps, kinds)
    first = fit and {"reads": sorted(fit["weights"]), "models": fit["models"], "fitted_on": fit.get("data"),
                     "out_of_fold": fit.get("oof"), "held_out": fit.get("held_out"), "exact": calibration.exact()}
    if query_fit is None:
        return first or None
    return {"reads": list(query_fit["weights"]), "models": calibration.models(comps, list(query_fit["reads"])),
            "fitted_on": query_fit["data"], "held_out": query_fit["held_out"], "exact": calibration.exact(),
            "query_fit": query_fit["name"], "min_docs": calibration.min_docs(), "smaller_indexes": first}


Handle.search.__signature__ = search_signature()   # help() and editors list every option


def open(path: str | os.PathLike, verify: bool = False, device: str | None = None,  # noqa: A001
         trust_remote_code: bool = False, generation: int | None = None) -> Index:
    """Open an index directory at its newest generation (cheap checks; `verify=True` also hashes
    every file). See Index."""
    return Index(path, verify=verify, device=device, trust_remote_code=trust_remote_code, generation=generation)
