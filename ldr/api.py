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
from .errors import ConfigError
from .handle import Handle
from .shard import LocalShard
from .index.build import BuildConfig, build_index, create_index
from .index.view import holds_index
from .index.ray_build import RayOptions, ray_options
from .search.hits import Hit, SearchResult, origin  # noqa: F401  (ldr.api.Hit)
from . import components as registry
from .search.options import search_signature

_NONE = object()

log = logging.getLogger(__name__)


class Index(Handle):
    """An opened index, pinned to one point in time (consistent across every component and
    shard) until `refresh()`: one index directory, a sharded index's directory (each shard pinned
    to the generation the cluster commit names), or a sharded index searched on Ray Serve
    (serve/ray_shards.py `open_on_ray`). Search, refresh, info, documents and writes are written
    once over the shard set (shard_sets.py). Components and models are loaded lazily on first
    use; one Index can be searched from many threads."""

    def __init__(self, path: str | os.PathLike, verify: bool = False, device: str | None = None,
                 trust_remote_code: bool = False, generation: int | None = None, *, shards=None):
        """Open an index at its newest generation (or `generation`). Always checked: the manifest's
        own checksum and shape, that every path stays inside the directory, every file's size,
        and the SHA-256 of files under 1 MB; `verify=True` hashes every file (as `ldr check` does,
        without its array checks). `trust_remote_code=True` lets models that ship their own code
        run: an index's manifest alone never grants that. `shards`: the shard set to search
        (default: the directory's own, one index or a sharded one)."""
        from .index.cluster import is_cluster
        from .shard_sets import LocalShards, OneIndex

        self.device, self.trust_remote_code, self.verify = device, trust_remote_code, verify
        if shards is None:
            shards = (LocalShards if is_cluster(path) else OneIndex)(Path(path), verify, device)
        self._set, self.path = shards, shards.path
        self._init_shared()
        self._snap = self._set.open(generation, self)

    # -- the point in time ------------------------------------------------------------------
    @property
    def manifest(self) -> dict:
        """The generation's manifest (a sharded index: the first shard's; every shard is built
        with the same settings)."""
        return self._snap.manifest

    @property
    def generation(self) -> int:
        """The generation this handle reads (a sharded index: the cluster's; 0: a format 2 index)."""
        return self._snap.generation

    @property
    def sharded(self) -> bool:
        return self._set.sharded

    def __len__(self) -> int:
        return len(self._snap)

    def refresh(self) -> bool:
        """Move to the newest committed generation; True when it changed. Searches already running
        finish on the point in time they took (pinned until the last of them lets go of it)."""
        new = self._set.newer(self._snap, self)
        old = None
        if new is not None:
            with self._load_lock:
                old, self._snap = self._snap, new
        self._set.moved(old, self._snap, self)
        return new is not None

    def close(self) -> None:
        """Release this handle's point in time (the garbage collector may then remove its files)."""
        self._set.close(self._snap, self)
        self._close_pool()

    # -- what one point in time holds ---------------------------------------------------------
    def document(self, doc_id: str) -> Doc:
        return self._set.document(self._snap, doc_id)

    def live_ids(self) -> list[str]:
        """The id of every document of this point in time."""
        return self._set.live_ids(self._snap)

    def ids_where(self, filters: dict) -> list[str]:
        """The ids of the documents that pass `filters` (ldr's filter dict): what a framework's
        delete by a metadata value (LlamaIndex's `delete_ref_doc`) removes."""
        import numpy as np

        snap = self._snap
        if not snap.views:
            raise ConfigError("the documents of an index served on Ray are read where its replicas are")
        conds = snap.conditions(filters) or None
        out = []
        for shard, view in zip(snap.shards, snap.views):
            segments, mask = view.segments, shard.mask(conds)
            out += segments.live_ids() if mask is None else \
                [segments.ids[d] for d in np.flatnonzero(mask & segments.live).tolist()]
        return out

    def info(self) -> dict:
        """What `ldr info` shows: counts, sizes, segments, each component described by its kind
        (a sharded index: summed, with each shard's generation and documents)."""
        from .language_defaults import of_manifest

        return {**self._set.info(self._snap), "search": self.search_defaults(),
                "search_recorded": dict(self.manifest.get("search", {})),
                "search_profile": of_manifest(self.manifest), "relevance": relevance_fit(self.manifest, len(self))}

    # -- a sharded index's parts, one index's files ---------------------------------------------
    @property
    def cluster(self) -> dict | None:
        """A sharded index's cluster commit (None: one index)."""
        return self._snap.cluster

    @property
    def map(self):
        """Global document numbers over the shards (offsets)."""
        return self._snap.map

    @property
    def shards(self) -> list["Index"]:
        """Each shard as an Index pinned to the generation the cluster names ([self]: one index)."""
        if not self.sharded:
            return [self]
        if not self._snap.views:
            raise ConfigError("the shards of an index served on Ray are opened where its replicas are")
        return [Index(self.path / s["path"], device=self.device, trust_remote_code=self.trust_remote_code,
                      generation=s["generation"]) for s in self._snap.cluster["shards"]]

    def _one(self):
        if self.sharded:
            raise ConfigError(f"{self.path} is a sharded index: this reads one index's files (index.shards[i])")
        return self._snap.views[0]

    @property
    def docstore(self):
        return self._one().segments

    def retriever(self, name: str, view=None):
        """The loaded first-stage reader `name` (bm25 | dense | sparse | colbert) of this generation:
        its files, no model (`query_side(name)` encodes queries for it)."""
        return self._set.files.retriever(view or self._one(), name)

    def as_shard(self) -> LocalShard:
        """This handle's generation as one shard of a search (a replica's)."""
        self._one()
        return self._snap.shards[0]

    def filter_mask(self, filters):
        """The filters' mask over this handle's document numbers (None: no filter)."""
        return self.as_shard().mask(self._snap.conditions(filters) or None)

    # -- building and writing ----------------------------------------------------------------
    @classmethod
    def build(cls, corpus: str | os.PathLike | Iterable, path: str | os.PathLike, *,
              config: BuildConfig | None = None, report: IngestReport | None = None,
              progress: bool = False, wait: bool | float = False, ray: "RayOptions | bool | None" = None,
              overwrite: bool = False, shards: int | None = None, **options) -> "Index":
        """Build an index from a corpus path or an iterable of Docs/dicts, then open it. `path` must
        not hold an index, unless `overwrite=True`: then a new generation holds only this corpus
        (as `ldr index --overwrite`; `index.add(...)` adds to one instead). `ray`: encode on a Ray
        cluster (True: a local one; RayOptions(address=...) for a running cluster). `shards=N`: a
        sharded index of N shards (routed by id; with `ray`, the shards build in parallel).

        `options` are BuildConfig fields (bm25="lucene", dense=None, sparse=None, language="de",
        k1=..., b=..., search={...}). The ingestion report is available as `index.report`.
        """
        if config is not None and options:
            raise ConfigError("give either config= or keyword options, not both")
        config = config or BuildConfig(**options)
        if shards is not None:
            return build_sharded(cls, corpus, path, shards, config, report, progress, wait, ray)
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

    def reshard(self, out: str | os.PathLike, shards: int, *, wait: bool | float = False) -> "Index":
        """A new sharded index of `shards` shards at `out` (a new or empty folder) with this
        index's documents, their encodings copied (nothing re-encoded); this one is left as it is."""
        return reshard(self, out, shards, wait=wait)


def build_sharded(cls, corpus, path, shards: int, config, report: IngestReport | None = None,
                  progress: bool = False, wait: bool | float = False, ray=None) -> Index:
    """Build a sharded index of `shards` shards (Index.build(..., shards=N)); `ray` (True or
    RayOptions): the shards build in parallel on a Ray cluster."""
    from .index.cluster import is_cluster
    from .index.cluster_writer import ClusterWriter
    from .index.target import cleared_if_first_build_fails

    report = report if report is not None else IngestReport()
    with cleared_if_first_build_fails(Path(path), is_cluster), \
            ClusterWriter(path, wait=wait, create=True, threads=config.threads) as w:
        w.build(corpus_docs(corpus, report, config.max_doc_mb, Path(path), config.doc_timeout), config, shards, report,
                progress, ray_options(ray))
    index = cls(path)
    index.report = report
    return index


def reshard(index: Index, out: str | os.PathLike, shards: int, *, wait: bool | float = False) -> Index:
    """A new sharded index of `shards` shards at `out` (a new or empty folder) with the documents
    of `index`, sharded or not, their encodings copied (nothing re-encoded); `index` is left as it
    is. `ldr.reshard(ldr.open("idx"), "idx4", 4)`; `ldr reshard -i idx -o idx4 --shards 4`."""
    if index.sharded:
        with index._writer(wait) as w:
            w.reshard(Path(out).absolute(), shards)
    else:
        from .index.cluster_writer import reshard_index
        reshard_index(index.path, out, shards, wait=wait)
    return Index(out, device=index.device, trust_remote_code=index.trust_remote_code)


def relevance_fit(manifest: dict, documents: int | None = None) -> dict | None:
    """Which calibrated-relevance fit a default search of this index uses, and on what data it was
    fitted and checked (search/calibration.py); None where none applies (no --min-score).
    `documents`: the index's count; under the query fit's minimum, `small_index` says what the
    estimate does there, as measured on sub-corpora (bench/bench_relevance_small.py)."""
    from .search import calibration

    comps = manifest["components"]
    kinds = registry.in_order(comps)
    fit, query_fit = calibration.fit_for(comps, kinds), calibration.query_fit_for(comps, kinds)
    first = fit and {"reads": sorted(fit["weights"]), "models": fit["models"], "fitted_on": fit.get("data"),
                     "out_of_fold": fit.get("oof"), "held_out": fit.get("held_out"), "exact": calibration.exact()}
    own = manifest.get("search", {}).get("relevance_fit")       # `ldr tune --relevance`
    own = own and {k: own.get(k) for k in ("data", "split", "queries", "hits", "estimate", "kinds", "ece", "min_score",
                                           "precision", "confidence", "at")}
    if query_fit is None:
        return dict(first, own_fit=own) if first else None
    return {"reads": list(query_fit["weights"]), "models": calibration.models(comps, list(query_fit["reads"])),
            "fitted_on": query_fit["data"], "held_out": query_fit["held_out"], "exact": calibration.exact(),
            "query_fit": query_fit["name"], "min_docs": calibration.min_docs(), "smaller_indexes": first,
            "own_fit": own, "small_index": small_index(documents)}


def small_index(documents: int | None) -> dict | None:
    """Under the query fit's minimum of documents: the first estimate applies, and how it fared on
    random sub-corpora of that size, the queries they answer and those they do not (issue 78)."""
    from .search import calibration

    if documents is None or documents >= calibration.min_docs():
        return None
    return {"documents": documents, "estimate": "first", "measured": calibration.table().get("small_indexes")}


Handle.search.__signature__ = search_signature()   # help() and editors list every option


def open(path: str | os.PathLike, verify: bool = False, device: str | None = None,  # noqa: A001
         trust_remote_code: bool = False, generation: int | None = None) -> Index:
    """Open an index directory, one index or a sharded one, at its newest generation (cheap
    checks; `verify=True` also hashes every file). See Index."""
    return Index(path, verify=verify, device=device, trust_remote_code=trust_remote_code, generation=generation)
