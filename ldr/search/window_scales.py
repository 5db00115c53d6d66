"""The window stage's evidence at fixed scales: windows of S analysed terms, each half overlapping
the next, placed over a document's term stream, scored by BM25 among the windows of the same
scale of every candidate. Two scales (a stretch of discussion and a few sentences) tell a document
that answers the query in one place from its siblings better than the vector kinds' passages do
(qmsum-train +1.2 nDCG@10 held out, bench/README.md).

A shard sends where the query's terms occur in each document's stream (`occurrences`), a few
kilobytes a document; the coordinator places the windows of any scale over them (`best_at`)."""
from __future__ import annotations

import numpy as np


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
        if s < 2 or not 0 < w <= 1 or not np.isfinite(w):
            raise QueryError(f"window_scales takes TERMS:SHARE pairs such as 120:0.6,40:0.4 (at least 2 terms, "
                             f"a share in (0, 1]) or 'passages'; got {spec!r}")
        out.append((s, w))
    return tuple(out)


def occurrences(stream: np.ndarray, vocab: dict, terms: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(positions in `stream` holding one of `terms`, the term's column in `terms`), positions ascending."""
    pairs = sorted((vocab[t], j) for j, t in enumerate(terms) if t in vocab)
    if not pairs or not len(stream):
        return np.zeros(0, np.int32), np.zeros(0, np.uint16)
    col = np.full(len(vocab) + 1, -1, dtype=np.int32)       # a lookup table: one gather for the stream
    col[[q for q, _ in pairs]] = [j for _, j in pairs]
    got = col[stream]
    pos = np.flatnonzero(got >= 0)
    return pos.astype(np.int32), got[pos].astype(np.uint16)


def _windows(n_terms: int, pos: np.ndarray, cols: np.ndarray, size: int, n_cols: int) -> tuple[np.ndarray, np.ndarray]:
    """(tf (windows × n_cols), lengths) of windows of `size` terms every size // 2 over a stream of
    `n_terms` terms, from the query terms' positions."""
    step = max(1, size // 2)
    m = 1 if n_terms <= size else -(-(n_terms - size) // step) + 1
    tf = np.zeros((m, n_cols))
    if len(pos):
        pos = pos.astype(np.int64)
        last = np.minimum(pos // step, m - 1)                   # the last window holding each position
        for back in range(-(-size // step)):                    # and the ones before it that reach it
            j = last - back
            ok = (j >= 0) & (j * step + size > pos)
            np.add.at(tf, (j[ok], cols[ok].astype(np.int64)), 1)
    lengths = np.clip(np.minimum(size, n_terms - np.arange(m) * step), 1, None).astype(np.float64)
    return tf, lengths


def best_at(feats: dict, docnos: list[int], size: int, n_cols: int, k1: float, b: float) -> dict[int, float]:
    """{docno: the BM25 of its best window of `size` terms among these documents' windows of that size}."""
    got = [(d, feats[d]) for d in docnos if d in feats and feats[d].n_terms]
    if not got or not n_cols:
        return {d: 0.0 for d in docnos}
    parts = [_windows(f.n_terms, f.at, f.at_col, size, n_cols) for _, f in got]
    tf = np.concatenate([p[0] for p in parts])
    lengths = np.concatenate([p[1] for p in parts])
    n, avg = len(lengths), max(lengths.mean(), 1.0)
    df = (tf > 0).sum(axis=0)
    idf = np.log1p((n - df + 0.5) / (df + 0.5))
    norm = k1 * (1 - b + b * lengths / avg)
    scores = (idf * tf / (tf + norm[:, None])).sum(axis=1)
    out, at = {d: 0.0 for d in docnos}, 0
    for (d, _), (t, _) in zip(got, parts):
        out[d] = float(scores[at:at + len(t)].max())
        at += len(t)
    return out


def scale_key(size: int) -> str:
    """The key of a scale's best-window BM25 among a document's window evidence."""
    return f"t{size}"
