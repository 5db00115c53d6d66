"""BM25 on ldr's own inverted index: tantivy's analyzers, postings as memory-mapped .npy, and k1/b
applied at query time (any values, per query), touching only the postings of the query terms.

Lucene's BM25: idf = ln(1 + (N − n + 0.5)/(n + 0.5)); tf part = tf / (tf + k1·(1 − b + b·dl/avgdl)).
"""
from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa

from ... import npy
from ...corpus import Doc
from ..analysis import Analyzer, cjk_pretokenize
from ..topk import top_k_dense, top_k_dense_block
from ..analysis import first_terms
from ...corpus.text import text_chunks
from ...errors import IndexFormatError
from ...values import CollectionStats
from .native_scoring import GlobalQuery, TermTable, score_segment
from .vocabulary import Vocabulary, write_vocabulary


def _analyzer(a: Analyzer):
    from ..analysis import text_analyzer
    return text_analyzer(a)


class NativeWriter:
    def __init__(self, path: Path, analyzer: Analyzer, threads: int = 1):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self._an = _analyzer(analyzer)
        self._cjk = analyzer.is_cjk
        self._vocab: dict[str, int] = {}
        self._docs = open(self.path / "docs.i32", "wb")
        self._tfs = open(self.path / "tfs.i32", "wb")
        self._lengths: list[int] = []
        self._counts: list[int] = []

    def add(self, docno: int, doc: Doc) -> None:
        # analysed a megabyte at a time: a list of every token of a 100 MB text would take GBs
        tf, n_tokens = Counter(), 0
        for part in ([doc.title] if doc.title else []) + [doc.text]:
            for chunk in text_chunks(part):
                tokens = self._an.analyze(cjk_pretokenize(chunk) if self._cjk else chunk)
                n_tokens += len(tokens)
                tf.update(self._vocab.setdefault(t, len(self._vocab)) for t in tokens)
        terms = np.fromiter(tf.keys(), dtype=np.int32, count=len(tf))
        self._docs.write(terms.tobytes())
        self._tfs.write(np.fromiter(tf.values(), dtype=np.int32, count=len(tf)).tobytes())
        self._counts.append(len(tf))
        self._lengths.append(n_tokens)

    def close(self) -> None:
        from ..sparse_store import save_inverted

        self._docs.close()
        self._tfs.close()
        terms = np.fromfile(self.path / "docs.i32", dtype=np.int32)
        tfs = np.fromfile(self.path / "tfs.i32", dtype=np.int32)
        save_inverted(self.path, terms, tfs, self._counts, len(self._vocab), "tfs")
        np.save(self.path / "doc_lengths.npy", np.asarray(self._lengths, dtype=np.float32))
        write_vocabulary(self.path, list(self._vocab))       # ids were given in insertion order
        (self.path / "docs.i32").unlink()
        (self.path / "tfs.i32").unlink()

    def abort(self) -> None:
        self._docs.close()
        self._tfs.close()


class NativeSegment:
    """One segment's postings (its own vocabulary), memory-mapped."""

    def __init__(self, path: Path):
        p = Path(path)
        self.path = p
        try:
            self.vocab = Vocabulary(p)
        except (OSError, ValueError, pa.ArrowException) as e:
            raise IndexFormatError(f"the native BM25 vocabulary in {p} is damaged ({type(e).__name__}: {str(e)[:200]}); "
                                   "run `ldr check` and rebuild the index") from None
        # still mapped, as plain arrays: a slice of np.memmap costs ~4 us of Python (its
        # __array_finalize__), a query's dozens of posting lists a millisecond
        self.indptr = np.asarray(npy.load(p / "term_indptr.npy", mmap_mode="r"))
        self.docs = np.asarray(npy.load(p / "term_docs.npy", mmap_mode="r"))
        self.tfs = np.asarray(npy.load(p / "term_tfs.npy", mmap_mode="r"))
        self.lengths = npy.load(p / "doc_lengths.npy")
        ip = self.indptr
        if (ip.ndim != 1 or len(ip) != len(self.vocab) + 1 or ip[0] != 0
                or ip[-1] != len(self.docs) or len(self.docs) != len(self.tfs) or np.any(np.diff(ip) < 0)):
            raise IndexFormatError(f"the native BM25 index {p} is inconsistent (offsets do not match the postings); "
                                   "run `ldr check` and rebuild the index")

    def postings(self, term: str):
        t = self.vocab.get(term)
        if t is None:
            return None
        s, e = int(self.indptr[t]), int(self.indptr[t + 1])
        return self.docs[s:e], self.tfs[s:e]


DF_CACHE = 1 << 16      # terms whose document frequency a searcher keeps (a sharded search asks every query)
BLOCK_CELLS = 1 << 22   # (query, document) scores summed at once: 32 MB of float64


class NativeSearcher:
    """BM25 over every segment of a generation, with the statistics of its live documents: the
    scores equal those of an index built fresh from the same documents, however it was assembled."""

    name = "native"

    def __init__(self, parts: list[tuple[Path, int, np.ndarray]], analyzer: Analyzer, k1: float, b: float):
        """`parts`: (segment's bm25 folder, its first global document number, its deleted mask)."""
        self.k1, self.b = k1, b
        self._an = _analyzer(analyzer)
        self._cjk = analyzer.is_cjk
        self.segments = []
        for path, offset, deleted in parts:
            seg = NativeSegment(path)
            if len(seg.lengths) != len(deleted):
                raise IndexFormatError(f"the native BM25 index {path} has {len(seg.lengths)} documents, its segment "
                                       f"{len(deleted)}; run `ldr check` and rebuild the index")
            self.segments.append((seg, offset, ~deleted))
        self.lengths = np.concatenate([s.lengths for s, _, _ in self.segments]) if self.segments else np.zeros(0, np.float32)
        self.live = np.concatenate([lv for _, _, lv in self.segments]) if self.segments else np.zeros(0, bool)
        self.n = self.num_docs = int(self.live.sum())
        self._whole = [bool(lv.all()) for _, _, lv in self.segments]     # a segment with no deletion
        self.table = TermTable(self.segments, self._whole, DF_CACHE)
        # a float64 sum of whole token counts is exact, so avgdl does not depend on the segment order
        self.length = float(self.lengths[self.live].astype(np.float64).sum())     # live documents' terms, summed
        self.avgdl = self.length / self.n if self.n else 1.0

    def encode(self, query: str) -> str:
        return query

    def _terms(self, query: str) -> Counter:
        return Counter(first_terms(self._an.analyze(cjk_pretokenize(query) if self._cjk else query)))

    def _df(self, term: str) -> int:
        """A term's live document frequency."""
        got = self.table.rows([term])
        return int(got.df[got.rows[0]])

    def collection_stats(self, query: str) -> CollectionStats:
        """This shard's part of the statistics a sharded search scores with (live documents only)."""
        terms = list(self._terms(query))
        got = self.table.rows(terms)
        return CollectionStats(self.n, self.length,
                               dict(zip(terms, got.df[got.rows].tolist())))

    def collection_stats_many(self, queries: list[str]) -> list[CollectionStats]:
        """collection_stats of each query, their terms looked up together."""
        terms = [list(self._terms(q)) for q in queries]
        got = self.table.rows([t for ts in terms for t in ts])
        df = got.df[got.rows].tolist()
        length = self.length
        out, at = [], 0
        for ts in terms:
            out.append(CollectionStats(self.n, length, dict(zip(ts, df[at:at + len(ts)]))))
            at += len(ts)
        return out

    @staticmethod
    def with_collection_stats(query: str, parts: list[CollectionStats]) -> GlobalQuery:
        """The query with every shard's statistics summed (the sums of whole numbers are exact)."""
        total = CollectionStats.total(parts)
        return GlobalQuery(query, total.n, total.length / total.n if total.n else 1.0, total.df)

    def provisional(self, totals) -> GlobalQuery:
        """The query a shard ranks the whole index's totals with (native_evidence.py)."""
        from .native_evidence import provisional
        return provisional(self, totals)

    def evidence(self, query: GlobalQuery, listed: list, depth: int, distribution: bool, filtered: bool):
        """What scores `listed` exactly once the whole index's frequencies are known (native_evidence.py)."""
        from .native_evidence import evidence
        return evidence(self, query, listed, depth, distribution, filtered)

    def exact_scores(self, rep, docnos: list[int], first_stage: dict) -> np.ndarray:
        """The passage rescorer's BM25 feature: the first stage's score (0 where it did not return one)."""
        return np.array([first_stage.get(d, 0.0) for d in docnos], dtype=np.float64)

    def search_rep(self, query: str, k: int, allow: np.ndarray | None = None) -> list[tuple[int, float]]:
        scores = self.scores(query)
        self._last = (query, scores)        # unmasked: what score_distribution(query) may ask next
        if allow is not None:   # a filter: only allowed documents compete for the k places
            scores = np.where(allow, scores, np.float32(0))
        return top_k_dense(scores, k)

    def search_many(self, queries: list, k: int, allow: np.ndarray | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
        """search_rep of each query (str or GlobalQuery), scored together: a few array operations a
        batch instead of a few a query term (each document's score is the one search_rep gives), as
        (docnos, scores) arrays (the shard names every query's documents at once)."""
        out = []
        for block in self._blocks(queries, self.k1, self.b):
            if allow is not None:
                block = np.where(allow, block, np.float32(0))
            out.extend(top_k_dense_block(block, k))
        return out

    def score_distribution(self, query: "str | GlobalQuery") -> dict:
        """The query's scores over every live document of the generation, whatever a filter allows,
        as sums that add up across shards: {"n", "sum", "sumsq", "max"} (the relevance estimate
        places a document's score in them: search/calibration.py). Free after search_rep(query)."""
        last = getattr(self, "_last", None)
        scores = last[1] if last is not None and last[0] is query else self.scores(query)
        live = scores[self.live].astype(np.float64)
        return {"n": int(live.size), "sum": float(live.sum()), "sumsq": float(live @ live),
                "max": float(live.max()) if live.size else 0.0}

    def scores(self, query: "str | GlobalQuery", k1: float | None = None, b: float | None = None) -> np.ndarray:
        """A score per document number of the generation (0 for deleted documents)."""
        return next(self._blocks([query], self.k1 if k1 is None else k1, self.b if b is None else b))[0]

    def _weighted(self, queries: list) -> tuple:
        """Every (query, term) pair of `queries`, in each query's term order, as arrays: (the
        terms' rows in self.table with the arrays they index, each pair's weight qtf·idf (0: no
        live document holds it), each query's first pair), with the query's own statistics where
        it carries the whole index's."""
        counts = [self._terms(q.text if isinstance(q, GlobalQuery) else q) for q in queries]
        lens = np.fromiter(map(len, counts), dtype=np.int64, count=len(counts))
        first = np.zeros(len(queries) + 1, dtype=np.int64)
        np.cumsum(lens, out=first[1:])
        terms = [t for c in counts for t in c]
        got = self.table.rows(terms)
        qtf = np.fromiter(itertools.chain.from_iterable(c.values() for c in counts), dtype=np.float64, count=len(terms))
        if any(isinstance(q, GlobalQuery) for q in queries):
            df = np.fromiter((q.df.get(t, 0) if isinstance(q, GlobalQuery) else self._df(t)
                              for q, c in zip(queries, counts) for t in c), dtype=np.float64, count=len(terms))
            n = np.repeat(np.array([q.n if isinstance(q, GlobalQuery) else self.n for q in queries], np.float64), lens)
        else:
            df, n = got.df[got.rows].astype(np.float64), float(self.n)
        idf = np.log1p((n - df + 0.5) / (df + 0.5))
        return got, np.where(df > 0, qtf * idf, 0.0), first

    def _blocks(self, queries: list, k1: float, b: float):
        """(queries, documents) float32 score blocks of at most BLOCK_CELLS cells, in order
        (native_scoring.py sums each block's postings, segment by segment)."""
        docs = len(self.lengths)
        terms, weights, first = self._weighted(queries)
        avgdls = {q.avgdl if isinstance(q, GlobalQuery) else self.avgdl for q in queries}
        step = max(1, BLOCK_CELLS // max(docs, 1)) if len(avgdls) == 1 else 1
        for at in range(0, len(queries), step):
            end, q0 = min(at + step, len(queries)), queries[at]
            norm = self._norm(k1, b, q0.avgdl if isinstance(q0, GlobalQuery) else self.avgdl)
            out = np.zeros((end - at, docs), dtype=np.float32)
            cut = slice(first[at], first[end])
            owner = np.repeat(np.arange(end - at, dtype=np.int64), np.diff(first[at:end + 1]))
            rows = terms.rows[cut]
            for si, ((seg, offset, live), whole) in enumerate(zip(self.segments, self._whole)):
                starts, ends = terms.start[si][rows], terms.end[si][rows]
                asked = (ends > starts) & (weights[cut] > 0)
                if asked.any():
                    n = len(live)
                    out[:, offset:offset + n] = score_segment(
                        seg.docs, seg.tfs, None if whole else live, norm[offset:offset + n],
                        (starts[asked], ends[asked], owner[asked], weights[cut][asked]), end - at)
            yield out

    def _norm(self, k1: float, b: float, avgdl: float) -> np.ndarray:
        """k1·(1 − b + b·dl/avgdl) per document, kept for the last (k1, b, avgdl): a generation's
        lengths never change, and most queries ask the index's own k1 and b."""
        key = (k1, b, avgdl)
        got = getattr(self, "_norms", None)
        if got is None or got[0] != key:
            got = self._norms = (key, k1 * (1 - b + b * self.lengths / avgdl))
        return got[1]

    def bound(self, query: "str | GlobalQuery") -> float:
        """The highest score `query` can reach here (this scorer leaves out the constant k1+1): every
        query term saturated, a term no document holds included at its idf, as the relevance
        estimate was fitted (search/calibration.py)."""
        stats = query if isinstance(query, GlobalQuery) else None
        terms = self._terms(stats.text if stats else query)
        got = None if stats else self.table.rows(list(terms))
        local = got.df[got.rows].tolist() if got is not None else []
        n, out = (stats.n if stats else self.n), 0.0
        for j, (term, qtf) in enumerate(terms.items()):
            df = stats.df.get(term, 0) if stats else local[j]
            out += qtf * float(np.log1p((n - df + 0.5) / (df + 0.5)))
        return out

    def search(self, query: str, k: int, k1: float | None = None, b: float | None = None) -> list[tuple[int, float]]:
        return top_k_dense(self.scores(query, k1, b), k)

