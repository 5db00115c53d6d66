"""A query's terms found in many documents' analysed windows at once, from each document's
postings, kept with its windows (window_terms.py): its windows as (term, window, count) cells, and
its term stream as each term's positions.

The window features count the query's terms in every window of the candidates and list where they
occur in each term stream. Read term by term, a candidate costs its length; looked up in postings,
it costs its cells and occurrences, and every candidate's lookup is one search over all of them
(qmsum-train's 50 candidates, ~9k terms each: the features 3.3 → 2.1 ms a query, the same values).
Also the candidates' `covers`, the share of the query's terms two neighbouring windows hold (the
relevance reads it).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..arrays import ranges


class Postings(NamedTuple):
    """A sequence of term ids by term: the distinct ids ascending, where each one's entries start
    among `where` (and the end), and the entries: its positions in the sequence (ascending within
    a term), or, for windows (`of_windows`), the windows holding it (ascending) with its count in
    each (`counts`)."""
    terms: np.ndarray               # (k,) int32
    starts: np.ndarray              # (k + 1,) int32
    where: np.ndarray               # (n,) int32
    counts: np.ndarray | None = None

    @classmethod
    def of(cls, ids: np.ndarray) -> "Postings":
        order = np.argsort(ids, kind="stable")
        ranked = ids[order]
        first = np.flatnonzero(np.r_[True, ranked[1:] != ranked[:-1]]) if len(ranked) else np.zeros(0, np.int64)
        return cls(ranked[first].astype(np.int32), np.append(first, len(ranked)).astype(np.int32),
                   order.astype(np.int32))

    @classmethod
    def of_windows(cls, ids: np.ndarray, indptr: np.ndarray) -> "Postings":
        """The (term, window) cells of windows whose term ids are `ids` (window i's: ids[indptr[i]:
        indptr[i + 1]]), each with its count: a query counts its terms in the windows from these."""
        m = len(indptr) - 1
        if not len(ids):
            empty = np.zeros(0, np.int32)
            return cls(empty, np.zeros(1, np.int32), empty, empty)
        window = np.repeat(np.arange(m, dtype=np.int64), np.diff(indptr))
        cells, counts = np.unique(ids.astype(np.int64) * m + window, return_counts=True)   # by term, then window
        term, window = np.divmod(cells, m)
        first = np.flatnonzero(np.r_[True, term[1:] != term[:-1]])
        return cls(term[first].astype(np.int32), np.append(first, len(cells)).astype(np.int32),
                   window.astype(np.int32), counts.astype(np.int32))


def occurrences(posts: list[Postings], ids: np.ndarray, cols: np.ndarray) -> tuple:
    """(document, entry, column, count or None) of every entry of the term `ids` (their columns
    `cols`) in the documents of `posts` (a position in each one's own sequence, or a window with the
    term's count in it), by document, then term."""
    n_docs = len(posts)
    k = np.fromiter((len(p.terms) for p in posts), dtype=np.int64, count=n_docs)
    counted = bool(n_docs) and posts[0].counts is not None
    if not n_docs or not len(ids) or not k.sum():
        none = np.zeros(0, np.int64)
        return none, none, none, (none if counted else None)
    n = np.fromiter((len(p.where) for p in posts), dtype=np.int64, count=n_docs)
    docs = np.arange(n_docs, dtype=np.int64)
    by_id = np.argsort(ids, kind="stable")          # the keys asked in order: the search walks them once
    ids, cols = np.asarray(ids, dtype=np.int64)[by_id], np.asarray(cols, dtype=np.int64)[by_id]
    # every document's distinct terms as one ascending key (document, term): one search for all
    key = np.repeat(docs << 32, k) | np.concatenate([p.terms for p in posts]).astype(np.int64)
    shift = np.repeat(np.cumsum(n) - n, k)          # a document's entries' place among all of them
    starts = np.concatenate([p.starts[:-1] for p in posts]).astype(np.int64) + shift
    ends = np.concatenate([p.starts[1:] for p in posts]).astype(np.int64) + shift
    asked = ((docs[:, None] << 32) | ids[None, :]).ravel()
    j = np.minimum(np.searchsorted(key, asked), len(key) - 1)
    hit = key[j] == asked
    j, doc, col = j[hit], np.repeat(docs, len(ids))[hit], np.tile(cols, n_docs)[hit]
    count = ends[j] - starts[j]
    at = ranges(starts[j], count)
    where = np.concatenate([p.where for p in posts])[at].astype(np.int64)
    times = np.concatenate([p.counts for p in posts])[at] if counted else None
    return np.repeat(doc, count), where, np.repeat(col, count), times


def window_counts(windows: list[int], doc: np.ndarray, window: np.ndarray, col: np.ndarray, count: np.ndarray,
                  n_terms: int) -> tuple[np.ndarray, list[slice]]:
    """(the (windows × terms) uint32 counts of the cells (`doc`, `window`: among its `windows`,
    `col`, `count`) of every document's windows, one after another; each document's rows)."""
    m = np.asarray(windows, dtype=np.int64)
    first = np.cumsum(m) - m
    rows_of = [slice(a, a + w) for a, w in zip(first.tolist(), m.tolist())]
    table = np.zeros(int(m.sum()) * n_terms, dtype=np.uint32)
    if n_terms and len(window):      # a (window, term) cell is listed once: no two add to one place
        table[(first[doc] + window) * n_terms + col] = count
    return table.reshape(int(m.sum()), n_terms), rows_of


PACKED = 40, 16         # in_order's one-number sort: document << 40 | position << 16 | column


def in_order(n_docs: int, doc: np.ndarray, pos: np.ndarray, col: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each document's (positions holding one of the query's terms, ascending, int32; their
    columns, uint16) from occurrences(), as views of two arrays."""
    shift, low = PACKED
    if not len(pos) or (int(pos.max()) < 1 << (shift - low) and n_docs < 1 << (63 - shift)
                        and int(col.max()) < 1 << low):
        # the three in one number: numpy sorts int64 values in SIMD (a position holds one term: no ties)
        packed = np.sort((doc << shift) | (pos << low) | col)
        doc, pos, col = packed >> shift, (packed >> low) & ((1 << (shift - low)) - 1), packed & ((1 << low) - 1)
    else:
        order = np.argsort((doc << 32) | pos)
        doc, pos, col = doc[order], pos[order], col[order]
    pos, col = pos.astype(np.int32), col.astype(np.uint16)
    cut = np.searchsorted(doc, np.arange(n_docs + 1)).tolist()
    return [(pos[a:e], col[a:e]) for a, e in zip(cut[:-1], cut[1:])]


def covers(feats: dict, docnos) -> dict[int, float]:
    """{docno: the largest share of the query's terms two neighbouring windows of it hold (a
    sentence across the boundary of two is still held whole)} of those with windows and terms."""
    got = [(d, f) for d in docnos if (f := feats.get(d)) is not None and len(f.spans) and f.tf.shape[1]]
    if not got or len({f.tf.shape[1] for _, f in got}) > 1:
        return {d: _cover(f) for d, f in got}
    rows = np.fromiter((len(f.spans) for _, f in got), dtype=np.int64, count=len(got))
    doc = np.repeat(np.arange(len(got)), rows)
    order = np.lexsort((np.concatenate([f.spans[:, 0] for _, f in got]), doc))   # each one's by start
    present = np.concatenate([f.tf for _, f in got])[order] > 0
    held = present.sum(axis=1)
    if len(present) > 1:
        # a window and the next one of its document (a document's last window alone holds no
        # more than its pair with the one before: the max is the same)
        pairs = (present[:-1] | present[1:]).sum(axis=1)
        held[:-1] = np.where(doc[:-1] == doc[1:], pairs, held[:-1])
    best = np.maximum.reduceat(held, np.cumsum(rows) - rows)
    n_cols = got[0][1].tf.shape[1]
    return {d: float(v / n_cols) for (d, _), v in zip(got, best.tolist())}


def _cover(f) -> float:
    """covers() of one document's windows (WindowFeatures)."""
    present = f.tf[np.argsort(f.spans[:, 0], kind="stable")] > 0
    pairs = present[:-1] | present[1:] if len(present) > 1 else present
    return float(pairs.sum(axis=1).max() / f.tf.shape[1])
