"""`ldr index`: what to build (BuildConfig) and where it may be written.

The build itself is a commit of the index writer (writer.py): new segments and a new generation
manifest in the target directory, so there is no moment without an index at the path."""
from __future__ import annotations

import copy
import logging
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from ..corpus import Doc, IngestReport
from ..errors import ConfigError
from ..components.bm25_store.analysis import Analyzer
from ..components.faiss_store import FaissSettings
from ..encode.dense import DenseSettings
from ..encode.sparse import SparseSettings
from ..options import DEFAULT_SEARCH
from .target import check_target

log = logging.getLogger(__name__)


@dataclass
class BuildConfig:
    bm25: str | None = "tantivy"          # tantivy | lucene | None
    language: str = "en"
    stemming: bool = True
    stopwords: bool = True
    k1: float | None = None               # None: the backend's default
    b: float | None = None
    threads: int = 0                      # 0: all cores
    max_doc_mb: float = 64.0              # larger documents are skipped and counted (memory bound)
    # the packaged MiniLM with MaxP by default; None: no dense component
    dense: DenseSettings | None = field(default_factory=DenseSettings)
    # the packaged SPLADE-tiny by default; None: no learned-sparse component
    sparse: SparseSettings | None = field(default_factory=SparseSettings)
    faiss: FaissSettings = field(default_factory=FaissSettings)
    # further kinds registered in ldr.components, by name: {"colbert": ColbertSettings(...)}
    components: dict = field(default_factory=dict)

    # query-time defaults recorded in the manifest (chosen by measurement: see bench/README.md)
    search: dict = field(default_factory=lambda: copy.deepcopy(DEFAULT_SEARCH))

    def __post_init__(self):
        if isinstance(self.dense, str):  # a model name or path
            self.dense = DenseSettings(model=self.dense)
        if isinstance(self.sparse, str):
            self.sparse = SparseSettings(model=self.sparse)
        if self.bm25 is None and self.dense is None and self.sparse is None and not self.components:
            raise ConfigError("nothing to index: enable at least one of BM25, dense and sparse")

    def analyzer(self) -> Analyzer:
        return Analyzer(self.language, self.stemming, self.stopwords)


def build_index(docs: Iterable[Doc], out: str | os.PathLike, config: BuildConfig | None = None,
                report: IngestReport | None = None, progress: bool = True, total: int | None = None,
                wait: bool | float = False, ray=None) -> dict:
    """Index `docs` into directory `out` as its next generation; returns the manifest. `ray`
    (RayOptions): encode on a Ray cluster.

    A new directory gets generation 1. An existing index gets a new generation holding only these
    documents: readers of the previous one keep answering from it until they refresh, and a
    build that fails or is killed leaves it the newest. Raises LdrError on bad input."""
    from . import generations as gens
    from .writer import IndexWriter

    config = config or BuildConfig()
    report = report if report is not None else IngestReport()
    out = Path(out).absolute()
    check_target(out)
    created = not out.exists()
    try:
        with IndexWriter(out, wait=wait, threads=config.threads, create=True) as writer:
            manifest = writer.rebuild(docs, config, report, progress=progress, total=total, ray=ray)
    except BaseException:
        # a first build that failed leaves no directory behind (only ldr's own files are in it)
        if created and out.is_dir() and not gens.generations(out):
            shutil.rmtree(out, ignore_errors=True)
        raise
    log.info("built %s (generation %d): %s", out, manifest["generation"], report.summary())
    return manifest
