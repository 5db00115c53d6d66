"""The native BM25 kernel: one segment's scores for a block of queries. Each term a block asks is
gathered once (its postings' BM25 tf part, tf / (tf + k1·(1 − b + b·dl/avgdl))); each (query,
term) pair then adds qtf·idf times it to its query's row, in float64 and in each query's term
order, so a document's score is the same whichever segment or shard holds it and however many
queries are scored with it. k1 and b stay query-time settings; nothing but the term table is kept
between queries. A block of many queries is one scipy sparse product (2x numpy's gather and
bincount on Chinese queries: ~180 terms each); one query is the bincount (importing scipy.sparse
costs a cold `ldr search` ~1 s). Both add the same products in the same order (a test holds them
equal).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np


@dataclass(frozen=True)
class GlobalQuery:
    """A BM25 query carrying the statistics of a whole sharded index: every shard scores with
    them, so a document's score is the one the unsharded index gives it, whichever shard holds it."""
    text: str
    n: int
    avgdl: float
    df: dict          # term → its document frequency over every shard


def _ranges(starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """The concatenation of arange(s, s + n) for each (s, n)."""
    ends = np.cumsum(lens)
    return np.arange(int(ends[-1]) if len(ends) else 0, dtype=np.int64) + np.repeat(starts - (ends - lens), lens)


def score_segment(docs: np.ndarray, tfs: np.ndarray, live: np.ndarray | None, norm: np.ndarray, pairs: tuple,
                  n_queries: int) -> np.ndarray:
    """(n_queries, documents) float32 scores of one segment: `docs`, `tfs` its postings by term;
    `live` its live mask (None: no deletion); `norm` k1·(1 − b + b·dl/avgdl) per document; `pairs`
    (starts, ends, query rows, weights) of the postings' spans each query asks, rows ascending."""
    n = len(norm)
    starts = np.asarray(pairs[0], dtype=np.int64)
    terms, col = np.unique(starts, return_inverse=True)
    ends = np.empty(len(terms), dtype=np.int64)
    ends[col] = np.asarray(pairs[1], dtype=np.int64)
    lens = ends - terms
    first = np.cumsum(lens) - lens                  # each term's first posting among the gathered
    at = _ranges(terms, lens)
    d = docs[at].astype(np.int64)
    tf = tfs[at].astype(np.float64)
    part = tf / (tf + norm[d])
    if live is not None:
        part[~live[d]] = 0.0        # a deleted document scores 0, as one that holds no query term
    if n_queries > 1:
        return _product(d, part, lens, col, pairs, n_queries, n)
    each = lens[col]
    pick = _ranges(first[col], each)                # every pair's postings, pair after pair
    weight = np.repeat(np.asarray(pairs[3], dtype=np.float64), each) * part[pick]
    cell = np.repeat(np.asarray(pairs[2], dtype=np.int64) * n, each) + d[pick]
    return np.bincount(cell, weights=weight, minlength=n_queries * n).reshape(n_queries, n).astype(np.float32)


def _product(d, part, lens, col, pairs, n_queries: int, n: int) -> np.ndarray:
    """The same sums as one sparse product: (queries × terms: qtf·idf, each row in its query's term
    order) @ (terms × documents: the tf parts); scipy adds a row's terms in their stored order."""
    import scipy.sparse as sp

    indptr = np.zeros(len(lens) + 1, dtype=np.int64)
    np.cumsum(lens, out=indptr[1:])
    rows = np.zeros(n_queries + 1, dtype=np.int64)
    np.cumsum(np.bincount(np.asarray(pairs[2], dtype=np.int64), minlength=n_queries), out=rows[1:])
    query = sp.csr_matrix((np.asarray(pairs[3], dtype=np.float64), col.astype(np.int64), rows),
                          shape=(n_queries, len(lens)))
    return (query @ sp.csr_matrix((part, d, indptr), shape=(len(lens), n))).toarray().astype(np.float32)


class Terms(NamedTuple):
    """Rows of a TermTable and the table's arrays as they were when the rows were given (a row
    is an index into them; a table cleared meanwhile by another thread changes nothing here)."""
    rows: np.ndarray
    df: np.ndarray
    start: list
    end: list


class TermTable:
    """Each term a searcher was asked, as a row of arrays: its live document frequency, and where
    its postings start and end in each segment (start = end: none there). A batch of queries maps
    its terms to rows with one dict lookup a term and does the rest as array operations; a
    generation's postings never change, so the rows are kept (up to `limit` terms). Searches of
    many threads share it: rows are added under a lock, and each lookup gets the arrays its rows
    index."""

    def __init__(self, segments: list, whole: list, limit: int):
        """`segments`: (NativeSegment, offset, live mask); `whole[i]`: segment i has no deletion."""
        self.segments, self.whole, self.limit = segments, whole, limit
        self._lock = threading.Lock()
        self._clear()

    def _clear(self) -> None:
        self.row: dict[str, int] = {}
        self.df = np.zeros(0, dtype=np.int64)
        self.start = [np.zeros(0, dtype=np.int64) for _ in self.segments]
        self.end = [np.zeros(0, dtype=np.int64) for _ in self.segments]

    def rows(self, terms: list[str]) -> Terms:
        """The row of each of `terms` with the arrays they index, those never asked looked up
        together in every segment."""
        with self._lock:
            new = [t for t in dict.fromkeys(terms) if t not in self.row]
            if new:
                if len(self.row) + len(new) > self.limit:
                    self._clear()
                    new = list(dict.fromkeys(terms))
                self._add(new)
            rows = np.fromiter(map(self.row.__getitem__, terms), dtype=np.int64, count=len(terms))
            return Terms(rows, self.df, self.start, self.end)

    def _add(self, new: list[str]) -> None:
        df = np.zeros(len(new), dtype=np.int64)
        start, end = list(self.start), list(self.end)
        for i, (seg, _, live) in enumerate(self.segments):
            ids = np.fromiter((-1 if t is None else t for t in seg.vocab.get_many(new)), dtype=np.int64, count=len(new))
            has = ids >= 0
            at = np.where(has, ids, 0)
            starts = np.where(has, seg.indptr[at], 0).astype(np.int64)
            ends = np.where(has, seg.indptr[at + 1], 0).astype(np.int64)
            if self.whole[i]:
                df += ends - starts
            else:
                df += np.array([int(live[seg.docs[a:e]].sum()) for a, e in zip(starts.tolist(), ends.tolist())],
                               dtype=np.int64)
            start[i] = np.concatenate([start[i], starts])
            end[i] = np.concatenate([end[i], ends])
        # new arrays, never grown in place: a lookup handed out before keeps the ones it indexes
        self.df, self.start, self.end = np.concatenate([self.df, df]), start, end
        self.row.update(zip(new, range(len(self.df) - len(new), len(self.df))))
