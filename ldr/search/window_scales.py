"""The window stage's evidence at fixed scales: windows of S analysed terms, each half overlapping
the next, placed over a document's term stream, scored by BM25 among the windows of the same
scale of every candidate. Two scales (a stretch of discussion and a few sentences) tell a document
that answers the query in one place from its siblings better than the vector kinds' passages do
(qmsum-train +0.9 nDCG@10 held out by 5-fold CV, +1.25 on all queries; bench/README.md).

A shard sends where the query's terms occur in each document's stream (`occurrences`), a few
kilobytes a document; the coordinator places the windows of any scale over them (`best_at`)."""
from __future__ import annotations

import numpy as np

MIN_TERMS, MAX_TERMS, MAX_SCALES = 10, 100_000, 4     # a request's bounds: windows per document, passes
DENSE_CELLS = 1 << 22      # counted in a windows × terms table up to this many cells, else by sorting
# ... and only while the table is at most this many times the cells counted: scanning a table of 600k
# cells for 34k (qmsum-train's windows of 40 terms) cost 2.9 ms, sorting them 1.0 (same counts); with
# numpy's SIMD sort, 3 (35 meetings' two scales: 1.00 ms a query at 6, 0.90 at 3)
DENSE_RATIO = 3


def parse(spec: str) -> tuple[tuple[int, float], ...]:
    """"120:0.6,40:0.4" → ((120, 0.6), (40, 0.4)); "passages" (or "") → () (the vector kinds' passages)."""
    from ..errors import QueryError

    spec = (spec or "").strip()
    if spec in ("", "passages"):
        return ()
    out = []
    for part in spec.split(","):
        size, _, share = part.strip().partition(":")
        try:
            s, w = int(size), float(share or 1)
        except ValueError:
            s, w = 0, -1.0
        if not MIN_TERMS <= s <= MAX_TERMS or not 0 < w <= 1 or not np.isfinite(w):
            raise QueryError(f"window_scales takes TERMS:SHARE pairs such as 120:0.6,40:0.4 ({MIN_TERMS} to "
                             f"{MAX_TERMS:,} terms, a share in (0, 1]) or 'passages'; got {spec!r}")
        out.append((s, w))
    if len(out) > MAX_SCALES:
        raise QueryError(f"window_scales takes at most {MAX_SCALES} sizes; got {len(out)}")
    return tuple(out)


def term_table(vocab: dict, terms: list[str]) -> np.ndarray:
    """A lookup table: term id → its column in `terms`, -1 for any other term (the last entry
    stands for ids added to the vocabulary after it was made)."""
    table = np.full(len(vocab) + 1, -1, dtype=np.int32)
    for j, t in enumerate(terms):
        if t in vocab:
            table[vocab[t]] = j
    return table


def occurrences(stream: np.ndarray, table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(positions in `stream` holding one of the table's terms, the term's column), positions ascending."""
    if not len(stream):
        return np.zeros(0, np.int32), np.zeros(0, np.uint16)
    got = np.take(table, stream, mode="clip")
    pos = np.flatnonzero(got >= 0)
    return pos.astype(np.int32), got[pos].astype(np.uint16)


def _placed(n_terms: int, pos: np.ndarray, cols: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(window of each occurrence, its column, each window's length) for windows of `size` terms
    every size // 2 over a stream of `n_terms` terms; an occurrence is listed once per window holding it."""
    step = max(1, size // 2)
    m = 1 if n_terms <= size else -(-(n_terms - size) // step) + 1
    lengths = np.clip(np.minimum(size, n_terms - np.arange(m) * step), 1, None).astype(np.float64)
    pos, cols = pos.astype(np.int64), cols.astype(np.int64)
    last = np.minimum(pos // step, m - 1)                       # the last window holding each position
    js, cs = [], []
    for back in range(-(-size // step)):                        # and the ones before it that reach it
        j = last - back
        ok = (j >= 0) & (j * step + size > pos)
        js.append(j[ok])
        cs.append(cols[ok])
    return np.concatenate(js), np.concatenate(cs), lengths


def _windows(n_terms: int, pos: np.ndarray, cols: np.ndarray, size: int, n_cols: int) -> tuple[np.ndarray, np.ndarray]:
    """(tf (windows × n_cols), lengths): the counts `_placed` stands for, as a matrix."""
    j, c, lengths = _placed(n_terms, pos, cols, size)
    tf = np.bincount(j * n_cols + c, minlength=len(lengths) * n_cols).reshape(len(lengths), n_cols)
    return tf.astype(np.float64), lengths


def _cells(got: list, size: int, n_cols: int, k1: float, b: float, memo: dict | None = None):
    """Every window of size `size` of these documents placed at once (as `_placed` places one
    document's), as the non-zero (window, column) cells: (each cell's window, column and BM25
    term score, the first window of each document, the number of windows). Most windows hold few
    of the query's terms, so memory follows the occurrences. `memo`, one query's over one set of
    candidates, keeps them for the next reader of the same size (a scale and the aspects)."""
    if memo is not None and (size, n_cols) in memo:
        return memo[size, n_cols]
    step = max(1, size // 2)
    n_terms = np.array([f.n_terms for _, f in got], dtype=np.int64)
    m = np.where(n_terms <= size, 1, -(-(n_terms - size) // step) + 1)       # windows per document
    starts = np.zeros(len(got), dtype=np.int64)
    np.cumsum(m[:-1], out=starts[1:])
    at = int(m.sum())
    local = np.arange(at, dtype=np.int64) - np.repeat(starts, m)
    lengths = np.clip(np.minimum(size, np.repeat(n_terms, m) - local * step), 1, None).astype(np.float64)
    owner = np.repeat(np.arange(len(got)), [len(f.at) for _, f in got])
    pos = np.concatenate([f.at for _, f in got]).astype(np.int64)
    cols = np.concatenate([f.at_col for _, f in got]).astype(np.int64)
    last = np.minimum(pos // step, m[owner] - 1)                # the last window holding each position
    key = starts[owner] * n_cols + cols                         # a cell: (window, column) as one number
    cells = [last * n_cols + key]
    for back in range(1, -(-size // step)):                     # and the ones before it that reach it
        j = last - back
        ok = (j >= 0) & (j * step + size > pos)
        cells.append((j * n_cols + key)[ok])
    cells = np.concatenate(cells)
    if at * n_cols <= min(DENSE_CELLS, DENSE_RATIO * len(cells)):
        counts = np.bincount(cells, minlength=at * n_cols)
        nz = np.flatnonzero(counts)
        counts = counts[nz]
    else:       # most windows hold none of the query's terms: sort the cells, not scan the table
        cells.sort()            # values alone: any order of equal ones is the same (numpy sorts int64 in SIMD)
        new = np.empty(len(cells), dtype=bool)
        new[:1] = True
        np.not_equal(cells[1:], cells[:-1], out=new[1:])
        first = np.flatnonzero(new)
        nz, counts = cells[first], np.diff(first, append=len(cells))
    tf, (win, col) = counts.astype(np.float64), np.divmod(nz, n_cols)
    df = np.bincount(col, minlength=n_cols)
    idf = np.log1p((at - df + 0.5) / (df + 0.5))
    norm = k1 * (1 - b + b * lengths / max(lengths.mean(), 1.0))
    out = win, col, idf[col] * tf / (tf + norm[win]), starts, at
    if memo is not None:
        memo[size, n_cols] = out
    return out


def best_at(feats: dict, docnos: list[int], size: int, n_cols: int, k1: float, b: float,
            memo: dict | None = None) -> dict[int, float]:
    """{docno: the BM25 of its best window of `size` terms among these documents' windows of that
    size}, scored over the non-zero counts only (`memo`: as `_cells` keeps them)."""
    got = [(d, feats[d]) for d in docnos if d in feats and feats[d].n_terms]
    out = {d: 0.0 for d in docnos}
    if not got or not n_cols:
        return out
    win, _, value, starts, at = _cells(got, size, n_cols, k1, b, memo)
    best = np.maximum.reduceat(np.bincount(win, weights=value, minlength=at), starts)
    for (d, _), v in zip(got, best.tolist()):
        out[d] = v
    return out


def best_per_group(feats: dict, docnos: list[int], size: int, groups: list[np.ndarray], n_cols: int,
                   k1: float, b: float, memo: dict | None = None) -> dict[int, np.ndarray]:
    """{docno: for each group of columns, the BM25 of the group's terms in its best window of
    `size` terms for that group}: `best_at` for each group's terms alone (df and lengths are the
    windows', whichever terms are counted), from one placing of the windows."""
    got = [(d, feats[d]) for d in docnos if d in feats and feats[d].n_terms]
    out = {d: np.zeros(len(groups)) for d in docnos}
    if not got or not n_cols or not groups:
        return out
    win, col, value, starts, at = _cells(got, size, n_cols, k1, b, memo)
    g = len(groups)
    # each cell once per group holding its column (a column may be in several): memory follows the
    # cells, not cells × groups, for a query of many sentences
    pairs = sorted({(int(c), j) for j, cs in enumerate(groups) for c in np.asarray(cs).tolist()})
    pair_col = np.array([c for c, _ in pairs], dtype=np.int64)
    pair_group = np.array([j for _, j in pairs], dtype=np.int64)
    count = np.bincount(pair_col, minlength=n_cols)
    first = np.cumsum(count) - count
    reps = count[col]
    cell = np.repeat(np.arange(len(col)), reps)
    within = np.arange(len(cell)) - np.repeat(np.cumsum(reps) - reps, reps)
    group = pair_group[first[col[cell]] + within]
    keys = win[cell] * g + group
    if at * g <= DENSE_CELLS:
        scores = np.bincount(keys, weights=value[cell], minlength=at * g).reshape(at, g)
        best = np.maximum.reduceat(scores, starts, axis=0)
    else:       # many windows and many groups: only the (window, group) pairs that hold a term
        uniq, inv = np.unique(keys, return_inverse=True)
        sums = np.bincount(inv, weights=value[cell])
        best = np.zeros((len(got), g))                  # a window holding none of a group's terms: 0
        np.maximum.at(best, (np.searchsorted(starts, uniq // g, side="right") - 1, uniq % g), sums)
    for i, (d, _) in enumerate(got):
        out[d] = best[i]
    return out


def scale_key(size: int) -> str:
    """The key of a scale's best-window BM25 among a document's window evidence."""
    return f"t{size}"
