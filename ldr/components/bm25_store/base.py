"""The BM25 backend interface and the registry of backends."""
from __future__ import annotations

from pathlib import Path
from typing import Protocol

from ...errors import ConfigError, IndexFormatError
from ..base import ComponentWriter, Retriever
from ..analysis import Analyzer, first_terms, index_text  # noqa: F401  (re-exported)


class BM25Writer(ComponentWriter, Protocol):
    pass


class BM25Searcher(Retriever, Protocol):
    name: str
    num_docs: int


BACKENDS = ("tantivy", "lucene", "native")

# Defaults per backend. tantivy's BM25 constants are fixed in its Rust scorer; Lucene defaults
# follow pyserini so that its numbers are comparable with published BM25 baselines.
DEFAULT_PARAMS = {"tantivy": (1.2, 0.75), "lucene": (0.9, 0.4), "native": (1.2, 0.75)}


def resolve_params(backend: str, k1: float | None, b: float | None) -> tuple[float, float]:
    if backend not in BACKENDS:
        raise ConfigError(f"unknown BM25 backend {backend!r}; choose one of {', '.join(BACKENDS)} or none")
    dk1, db = DEFAULT_PARAMS[backend]
    k1 = dk1 if k1 is None else float(k1)
    b = db if b is None else float(b)
    if k1 < 0 or not 0 <= b <= 1:
        raise ConfigError(f"BM25 needs k1 >= 0 and 0 <= b <= 1 (got k1={k1}, b={b})")
    if backend == "tantivy" and (k1, b) != (dk1, db):
        raise ConfigError(
            f"the tantivy backend scores with its built-in BM25 (k1={dk1}, b={db}); for k1={k1}, b={b} "
            "use --bm25 native (ldr's own index, tantivy's analysis) or --bm25 lucene, which take any k1 and b")
    return k1, b


def open_writer(backend: str, path: Path, analyzer: Analyzer, threads: int = 1, append: bool = False) -> BM25Writer:
    """A writer for the backends that keep one index of their own (tantivy, Lucene); documents are
    added by uid and deleted by uid. The native backend writes per segment (ldr/index/segment.py)."""
    if backend == "tantivy":
        from .tantivy_backend import TantivyWriter
        return TantivyWriter(path, analyzer, threads=threads, append=append)
    from .lucene_backend import LuceneWriter
    return LuceneWriter(path, analyzer, threads=threads, append=append)


def open_searcher(backend: str, path: Path, analyzer: Analyzer, k1: float, b: float,
                  n_docs: int | None = None, key: str = "uid") -> BM25Searcher:
    """Open a tantivy or Lucene index (hits are (uid, score)); `n_docs` (the live documents of the
    generation) must match what the index holds."""
    if backend == "tantivy":
        from .tantivy_backend import TantivySearcher
        searcher = TantivySearcher(path, analyzer, key, k1=k1)
    elif backend == "lucene":
        from .lucene_backend import LuceneSearcher
        searcher = LuceneSearcher(path, analyzer, k1, b)
    else:
        raise IndexFormatError(f"unknown BM25 backend {backend!r} in the manifest of {path.parent}")
    if n_docs is not None and searcher.num_docs != n_docs:
        raise IndexFormatError(f"the BM25 index {path} holds {searcher.num_docs} documents, the docstore "
                               f"{n_docs}; the index is damaged: rebuild it with `ldr index`")
    return searcher


def stale_bound(dfs: list[int], live: int, stale: int, avgdl_live: float, avgdl_stale: float, k1: float) -> float:
    """How far a tantivy/Lucene BM25 score can be from a fresh build's before `ldr merge`.

    Their document count, document frequencies and average length still count the `stale`
    documents deleted or replaced since the last merge. With df the fresh frequency of a query
    term, idf = ln((N + 1)/(df + 0.5)) is off by at most ln(1 + D/(df + 0.5)); the length norm
    by at most the ratio r of the two average lengths; the tf part is below k1 + 1. Summed over
    the query's terms (`dfs`), the score of every document is within the returned amount."""
    import math

    n = live + stale
    r = max(avgdl_stale / avgdl_live, avgdl_live / avgdl_stale) if avgdl_live > 0 and avgdl_stale > 0 else 1.0
    return sum((k1 + 1) * (math.log1p(stale / (df + 0.5)) + math.log((n + 1) / (df + 0.5)) * (r - 1)) for df in dfs)
