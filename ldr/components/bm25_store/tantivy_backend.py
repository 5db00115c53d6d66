"""BM25 with tantivy (Rust, embedded): the default backend."""
from __future__ import annotations

import logging
import math
import os
from collections import Counter
from pathlib import Path

import tantivy

from ...corpus import Doc
from ..analysis import Analyzer, cjk_pretokenize, first_terms, text_analyzer

TOKENIZER = "ldr"
FIELD = "body"
log = logging.getLogger(__name__)


KEY = "uid"          # format 2 indexes keyed documents by "docno" (their row), not indexed


def _schema() -> "tantivy.Schema":
    sb = tantivy.SchemaBuilder()
    # indexed so that a document can be deleted by its uid, fast to map hits back to documents
    sb.add_unsigned_field(KEY, stored=False, indexed=True, fast=True)
    sb.add_text_field(FIELD, stored=False, tokenizer_name=TOKENIZER, index_option="freq")
    return sb.build()


class TantivyWriter:
    """Adds to (and deletes from) the tantivy index in `path`: a new one, or with `append` the
    copy of the previous generation's that the index writer prepared there."""

    def __init__(self, path: Path, analyzer: Analyzer, threads: int = 1, heap_mb: int = 256, append: bool = False):
        path.mkdir(parents=True, exist_ok=True)
        self._cjk = analyzer.is_cjk
        self._index = tantivy.Index(_schema(), path=str(path), reuse=append)
        self._index.register_tokenizer(TOKENIZER, text_analyzer(analyzer))
        self._writer = self._index.writer(heap_size=heap_mb * 1_000_000 * max(threads, 1), num_threads=max(threads, 1))

    def delete(self, uids) -> None:
        # by a schema-aware query: a bare term would be typed from the Python int (i64) and never
        # match the u64 field
        uids = [int(u) for u in uids]
        for i in range(0, len(uids), 1024):
            q = tantivy.Query.term_set_query(self._index.schema, KEY, uids[i:i + 1024])
            self._writer.delete_documents_by_query(q)

    def add(self, uid: int, doc: Doc) -> None:
        d = tantivy.Document()
        d.add_unsigned(KEY, uid)
        # title and body as two values of one field: same terms and length as "title\nbody",
        # without copying a long body into a new string
        for text in (doc.title, doc.text) if doc.title else (doc.text,):
            d.add_text(FIELD, cjk_pretokenize(text) if self._cjk else text)
        self._writer.add_document(d)

    def close(self) -> None:
        self._writer.commit()
        self._writer.wait_merging_threads()

    def abort(self) -> None:
        """Stop tantivy's writer threads so that nothing writes into a directory being removed."""
        try:
            self._writer.rollback()
            self._writer.wait_merging_threads()
        except Exception:  # already failed or consumed: nothing left running
            pass


def _open_readonly(path: Path) -> "tantivy.Index":
    """tantivy takes a lock file even to read; on a read-only mount or snapshot it cannot, so the
    index is read from a private copy in a temporary folder (removed at exit) instead."""
    try:
        return tantivy.Index.open(str(path))
    except ValueError as e:
        if "Lockfile" not in str(e) or os.access(path, os.W_OK):
            raise
    import atexit
    import shutil
    import tempfile

    copy = Path(tempfile.mkdtemp(prefix="ldr-tantivy-ro-"))
    atexit.register(shutil.rmtree, copy, True)
    for f in path.iterdir():
        if f.is_file():
            shutil.copyfile(f, copy / f.name)
    log.info("%s is read-only: tantivy reads a private copy in %s", path, copy)
    return tantivy.Index.open(str(copy))


class TantivySearcher:
    name = "tantivy"

    def __init__(self, path: Path, analyzer: Analyzer, key: str = KEY, k1: float = 1.2):
        """`k1`: the constant of tantivy's built-in BM25 (bm25_store/base.py), for `bound`."""
        self._index = _open_readonly(Path(path))
        self.k1 = k1
        self.key = key
        self._analyzer = text_analyzer(analyzer)
        self._index.register_tokenizer(TOKENIZER, self._analyzer)
        self._cjk = analyzer.is_cjk
        self._schema = self._index.schema
        self._searcher = self._index.searcher()
        self.num_docs = self._searcher.num_docs

    def analyze(self, text: str) -> list[str]:
        return self._analyzer.analyze(cjk_pretokenize(text) if self._cjk else text)

    def encode(self, query: str) -> str:
        return query

    def search_rep(self, query: str, k: int) -> list[tuple[int, float]]:
        return self.search(query, k)

    def bound(self, query: str) -> float:
        """The highest score `query` can reach (every term's saturated weight, idf·(k1+1) times its
        count): a document's score over it says how much of the query it matches, whatever the
        other candidates (the calibrated relevance's BM25 feature)."""
        n, k1 = max(self.num_docs, 1), self.k1
        out = 0.0
        for term, qtf in Counter(first_terms(self.analyze(query))).items():
            df = self._searcher.doc_freq(FIELD, term)
            out += qtf * math.log1p((n - df + 0.5) / (df + 0.5)) * (k1 + 1)
        return out

    def search(self, query: str, k: int) -> list[tuple[int, float]]:
        """(uid, score) best first."""
        # Bag of words: each distinct query term once, boosted by its count (as Lucene/pyserini do).
        # Building the query from analysed terms avoids query-syntax errors on user text.
        terms = Counter(first_terms(self.analyze(query)))
        if not terms or k <= 0:
            return []
        clauses = []
        for term, n in terms.items():
            q = tantivy.Query.term_query(self._schema, FIELD, term)
            clauses.append((tantivy.Occur.Should, q if n == 1 else tantivy.Query.boost_query(q, float(n))))
        res = self._searcher.search(tantivy.Query.boolean_query(clauses), limit=k, count=False)
        if not res.hits:
            return []
        docnos = self._searcher.fast_field_values(self.key, [addr for _, addr in res.hits])
        return [(int(d), float(s)) for (s, _), d in zip(res.hits, docnos)]
