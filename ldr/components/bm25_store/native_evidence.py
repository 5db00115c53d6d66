"""Native BM25 over shards in one round (issue 79): each shard ranks with the whole index's document
count and average length (known when the point in time is opened) and its own document
frequencies scaled up to the whole index; it sends, with its list, what the coordinator needs to
score the listed documents exactly once every shard's frequencies are summed (each listed
document's term frequencies and length) and a bound that says whether a document it did not
list could still belong in the whole index's top `depth`.

Why the bound holds: a document's score is Σ_t w_t·p_t(d) with p_t ≥ 0 (the tf part, the same
under both weightings: the whole index's average length), so its exact score is at most
max_t(w_exact_t / w_ranked_t) times the score it was ranked by. A shard whose last listed score,
so scaled, is below the whole index's `depth`-th exact score cannot hide a better document; one
that fails the test is asked again with the exact statistics (search/exact_lists.py).

The exact scores are summed as native_scoring.score_segment sums them (float64, term by term in
the query's order, then float32), so they equal the unsharded index's to the bit.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...values import TermEvidence
from .native_scoring import GlobalQuery


MARGIN = 1e-6       # a listed score is float32: what it rounds may hide this much
DENSE_CELLS = 1 << 22   # the distribution's sums from a dense table up to this many cells
CROSS_TERMS = 256       # beyond this many query terms no T×T sums are sent (a pasted book: 10k terms, 800 MB);
                        # the shard is asked again with the exact statistics instead


@dataclass(frozen=True)
class IndexTotals:
    """The query as a coordinator first sends it to native BM25 shards: the whole index's live
    documents and average length; each shard brings its own document frequencies."""
    text: str
    n: int
    avgdl: float
    needs_evidence = True       # a shard answers it with TermEvidence (shard.py reads this, not the type)


def totals(query: str, parts: list) -> IndexTotals:
    """The whole index's totals from each shard's (live documents, their summed length)."""
    n = sum(p[0] for p in parts)
    length = sum(p[1] for p in parts)
    return IndexTotals(query, n, length / n if n else 1.0)


@dataclass
class Verdict:
    """One kind's lists scored exactly (search/exact_lists.py merges it into the shards' answers)."""
    rep: object                 # the exact GlobalQuery (what a shard asked again scores with)
    lists: dict                 # shard → its list, exact scores, best first
    distributions: dict         # shard → its part of the query's score distribution (asked)
    bound: float                # the highest score the query can reach in the whole index
    retry: list                 # shards whose lists (or maxima) could hide a better document


def idf(n, df) -> np.ndarray:
    """Lucene's idf (native_backend.py), as an array."""
    df = np.asarray(df, dtype=np.float64)
    return np.log1p((float(n) - df + 0.5) / (df + 0.5))


def weights(qtf, df, n) -> np.ndarray:
    """qtf·idf per query term, 0 where no live document holds the term (as the kernel weighs)."""
    df = np.asarray(df, dtype=np.float64)
    return np.where(df > 0, np.asarray(qtf, dtype=np.float64) * idf(n, df), 0.0)


def tf_parts(tfs: np.ndarray, lengths: np.ndarray, k1: float, b: float, avgdl: float) -> np.ndarray:
    """tf / (tf + k1·(1 − b + b·dl/avgdl)) with the kernel's arithmetic (a float32 norm, a
    float64 quotient): `lengths` float32, one per entry of `tfs`."""
    norm = k1 * (1 - b + b * np.asarray(lengths, dtype=np.float32) / avgdl)
    tf = np.asarray(tfs, dtype=np.float64)
    return tf / (tf + norm)


def provisional(searcher, totals: IndexTotals):
    """The GlobalQuery a shard ranks `totals` with: the whole index's n and average length, its
    own document frequencies scaled to the whole index (a term it holds keeps a positive weight)."""
    terms = list(searcher._terms(totals.text))
    got = searcher.table.rows(terms)
    local = got.df[got.rows].astype(np.float64)
    scale = totals.n / searcher.n if searcher.n else 1.0
    return GlobalQuery(totals.text, totals.n, totals.avgdl,
                       {t: float(v * scale) for t, v in zip(terms, local.tolist()) if v > 0})


def evidence(searcher, query, listed: list, depth: int, distribution: bool, filtered: bool,
             head: int = 64) -> TermEvidence:
    """What the coordinator needs of this shard's list for `query` (a provisional GlobalQuery):
    the query's terms, this shard's document frequencies, each listed document's term
    frequencies and length, the weights the list was ranked by, its last score (0.0: the list
    holds every document it could); with `distribution`, the sums that give the query's score
    distribution over every live document once the weights are known, and (`filtered`: the list
    is not) the `head` best documents whatever a filter allows (the distribution's max)."""
    counts = searcher._terms(query.text)
    terms = list(counts)
    got = searcher.table.rows(terms)
    df = got.df[got.rows].astype(np.int64)
    ranked = weights(list(counts.values()), [query.df.get(t, 0) for t in terms], query.n)
    docs = np.asarray([d for d, _ in listed], dtype=np.int32 if len(searcher.lengths) < 1 << 31 else np.int64)
    held = _live_postings(searcher, got)        # gathered once: the cells and the sums read them
    rows, cols, tfs = _cells_of(held, docs, len(searcher.lengths), len(terms))
    full = len(listed) < depth
    last = 0.0 if full else float(listed[-1][1])
    extra = {}
    distribution = distribution and len(terms) <= CROSS_TERMS
    if distribution:
        extra = _sums(searcher, held, len(terms), query.avgdl)
    if distribution and filtered:
        # the best documents whatever the filter: those within half the best score (the exact max
        # is among them unless a term's weight here is off by 2x), at most `head`
        kept = getattr(searcher, "_last", None)     # the search's own unmasked scores (search_rep keeps them)
        scores = kept[1] if kept is not None and kept[0] is query else searcher.scores(query)
        top = np.argpartition(-scores, head)[:head] if len(scores) > head else np.arange(len(scores))
        top = top[np.lexsort((top, -scores[top]))]
        top = top[scores[top] >= scores[top[0]] / 2] if len(top) and scores[top[0]] > 0 else top[:0]
        rest = scores.copy()
        rest[top] = 0
        beyond = float(rest.max()) if len(rest) else 0.0
        extra.update(head=top, head_cells=_cells_of(held, top, len(searcher.lengths), len(terms)),
                     head_lengths=searcher.lengths[top], head_beyond=beyond)
    return TermEvidence(tuple(terms), tuple(int(v) for v in counts.values()), tuple(df.tolist()), docs,
                        (rows, cols, tfs), searcher.lengths[docs] if len(docs) else np.zeros(0, np.float32),
                        ranked, last, searcher.n, searcher.k1, searcher.b, **extra)


def _live_postings(searcher, got) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(document number, term column, tf) of every live posting of the query's terms."""
    ds, cs, ts = [], [], []
    for si, (seg, offset, live) in enumerate(searcher.segments):
        for j, r in enumerate(got.rows.tolist()):
            a, e = int(got.start[si][r]), int(got.end[si][r])
            if e <= a:
                continue
            d = seg.docs[a:e].astype(np.int64)
            ok = live[d]
            ds.append(d[ok] + offset)
            cs.append(np.full(int(ok.sum()), j, dtype=np.int64))
            ts.append(seg.tfs[a:e][ok])
    if not ds:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(ds), np.concatenate(cs), np.concatenate(ts).astype(np.int64)


def _cells_of(held: tuple, docs: np.ndarray, rows: int, n_terms: int) -> tuple:
    """(row in `docs`, term column, tf) of every query term each of `docs` holds, narrowed for the
    wire (a query's cells are most of what a shard sends: 10 bytes a cell, not 24)."""
    d, c, t = held
    mark = np.full(rows, -1, dtype=np.int64)
    mark[np.asarray(docs, dtype=np.int64)] = np.arange(len(docs))
    at = mark[d] if len(d) else np.zeros(0, np.int64)
    hit = at >= 0
    return (at[hit].astype(np.int32), c[hit].astype(np.uint16 if n_terms < 1 << 16 else np.int32),
            t[hit].astype(np.int32))


def _sums(searcher, held: tuple, n_terms: int, avgdl: float) -> dict:
    """Σ_d p_t(d) and Σ_d p_t(d)·p_u(d) over every live document: the query's score sum and sum
    of squares for any weights w are w·sums and wᵀ·cross·w."""
    d, cols, tfs = held
    if not len(d):
        return {"sums": np.zeros(n_terms), "cross": np.zeros((n_terms, n_terms))}
    data = tf_parts(tfs, searcher.lengths[d], searcher.k1, searcher.b, avgdl)
    docs, at = np.unique(d, return_inverse=True)
    if len(docs) * n_terms <= DENSE_CELLS:      # a table of the documents holding a term: no scipy
        x = np.zeros((len(docs), n_terms))
        x[at, cols] = data
        return {"sums": x.sum(axis=0), "cross": x.T @ x}
    import scipy.sparse as sp
    x = sp.csr_matrix((data, (at, cols)), shape=(len(docs), n_terms))
    return {"sums": np.asarray(x.sum(axis=0)).ravel(), "cross": (x.T @ x).toarray()}


def exact_scores(cells: tuple, lengths: np.ndarray, n_docs: int, w: np.ndarray, k1: float, b: float,
                 avgdl: float) -> np.ndarray:
    """float32 scores of `n_docs` documents from their (row, column, tf) cells under weights `w`,
    summed as the kernel sums them: term after term in the query's order, in float64."""
    rows, cols, tfs = cells
    out = np.zeros(n_docs, dtype=np.float64)
    if len(rows):
        parts = tf_parts(tfs, lengths[rows], k1, b, avgdl)
        table = np.zeros((n_docs, len(w)))
        table[rows, cols] = parts
        for j in np.flatnonzero(w > 0).tolist():     # in order: a sum's order changes its last bit
            out += w[j] * table[:, j]
    return out.astype(np.float32)


def settle(query: str, evs: dict, depth: int, tot: IndexTotals, distribution: bool = False) -> Verdict:
    """`evs`: shard → its TermEvidence; `depth`: the whole index's list depth; `distribution`: the
    plan asks for the query's score distribution (a shard that sent no sums for it is asked again)."""
    first = next(iter(evs.values()))
    df = np.sum([np.asarray(e.df, dtype=np.int64) for e in evs.values()], axis=0)
    w = weights(first.qtf, df, tot.n)
    rep = GlobalQuery(query, tot.n, tot.avgdl, {t: int(v) for t, v in zip(first.terms, df.tolist()) if v})
    scored = {s: exact_scores(e.cells, e.lengths, len(e.docs), w, e.k1, e.b, tot.avgdl) for s, e in evs.items()}
    merged = np.sort(np.concatenate(list(scored.values())))[::-1]
    tau = float(merged[depth - 1]) if len(merged) >= depth else 0.0
    out = Verdict(rep, {}, {}, _bound(first.qtf, df, tot.n), [])
    for s, e in evs.items():
        ceiling = _ceiling(w, e)
        listed = sorted(zip(e.docs.tolist(), scored[s].tolist()), key=lambda r: (-r[1], r[0]))
        hides = e.last > 0 and ceiling(e.last) >= tau
        if e.sums is not None:
            dist, sure = _distribution(e, w, ceiling, listed[0][1] if listed else 0.0, tot.avgdl)
            out.distributions[s] = dist
            hides = hides or not sure
        elif distribution:
            hides = True
        if hides:
            out.retry.append(s)
        out.lists[s] = listed
    return out


def _ceiling(w: np.ndarray, e):
    """score → the most a document of this shard ranked at `score` can score exactly: the terms'
    exact weights over those it was ranked with, at most their largest ratio times the score, and
    at most the score plus every term's weight gained (a tf part is below 1)."""
    held = (np.asarray(e.df) > 0) & (e.ranked > 0)
    if not held.any():
        return lambda score: 0.0
    ratio = float(np.max(w[held] / e.ranked[held]))
    gain = float(np.sum(np.maximum(w[held] - e.ranked[held], 0.0)))
    return lambda score: min(ratio * score, score + gain) * (1 + MARGIN)


def _distribution(e, w: np.ndarray, ceiling, top: float, avgdl: float) -> tuple[dict, bool]:
    """(this shard's part of the query's score distribution under the exact weights, whether its
    max is sure: no document it did not score exactly can pass it)."""
    if e.head is not None:          # a filtered list: the best documents whatever the filter
        head = exact_scores(e.head_cells, e.head_lengths, len(e.head), w, e.k1, e.b, avgdl)
        best, beyond = (float(head.max()) if len(head) else 0.0), e.head_beyond
    else:
        best, beyond = top, e.last
    sure = beyond == 0 or ceiling(beyond) < best
    return {"n": int(e.n), "sum": float(w @ e.sums), "sumsq": float(w @ e.cross @ w), "max": best}, sure


def _bound(qtf, df, n: int) -> float:
    """NativeSearcher.bound with the whole index's frequencies (summed in the same order)."""
    out = 0.0
    for q, d in zip(qtf, np.asarray(df).tolist()):
        out += q * float(np.log1p((n - d + 0.5) / (d + 0.5)))
    return out

