"""The window stage's phrase evidence: how often a candidate holds the query's neighbouring terms
next to each other in the same order (the ordered pairs of the sequential dependence model,
Metzler and Croft 2005), scored by BM25 over those pairs among the candidates. A meeting and
its siblings share a query's words; the one it is about holds its phrases ("grad g", "remote
control", "twelve euro"). On qmsum-train, after the window scales: +1.40 nDCG@10 held out by
5-fold CV grouped by meeting (bench/README.md).

Queries of fewer than MIN_TERMS analysed terms get none. It reads what the shards already send
for the window scales (where the query's terms occur in
each candidate's term stream, window_scales.py): no new call, no new bytes."""
from __future__ import annotations

import numpy as np

KEY = "phrases"          # the raw score's key among a document's window evidence
# a query of fewer analysed terms gets no phrase evidence: short queries lose by it (manpages,
# median 5 terms: -1.07 nDCG@10 at weight 0.3, p 0.32); from 10 terms on manpages is unchanged and
# qmsum-train keeps all of its gain (chosen on those two; legal-case-reports-dev, held out: +1.10)
MIN_TERMS = 10


def query_pairs(sequence: list[str], columns: list[str]) -> dict[int, int]:
    """{pair code: its count in the query}: each pair of neighbouring analysed query terms as
    `column(a) * n + column(b)` over `columns` (the order the shards count the terms in)."""
    col = {t: j for j, t in enumerate(columns)}
    n, out = len(columns), {}
    for a, b in zip(sequence, sequence[1:]):
        if a in col and b in col:
            code = col[a] * n + col[b]
            out[code] = out.get(code, 0) + 1
    return out


def pair_scores(feats: dict, docnos: list[int], pairs: dict[int, int], n_cols: int,
                k1: float, b: float) -> dict[int, float]:
    """{docno: the BM25 of the query's ordered pairs in it, idf and length taken among `docnos`}
    (`feats`: each document's WindowFeatures; a document without them scores 0)."""
    out = {d: 0.0 for d in docnos}
    got = [(d, feats[d]) for d in docnos if d in feats and feats[d].n_terms]
    if not got or not pairs or not n_cols:
        return out
    codes = np.fromiter(pairs, dtype=np.int64, count=len(pairs))
    qtf = np.fromiter(pairs.values(), dtype=np.float64, count=len(pairs))
    order = np.argsort(codes)
    ordered = codes[order]
    # every candidate's occurrences together, each pair within one document
    sizes = np.fromiter((len(f.at) for _, f in got), dtype=np.int64, count=len(got))
    doc = np.repeat(np.arange(len(got)), sizes)
    at = np.concatenate([f.at for _, f in got]).astype(np.int64)
    cols = np.concatenate([f.at_col for _, f in got]).astype(np.int64)
    nxt = np.flatnonzero((at[1:] - at[:-1] == 1) & (doc[1:] == doc[:-1]))     # two query terms side by side
    found = cols[nxt] * n_cols + cols[nxt + 1]
    at_pair = np.searchsorted(ordered, found)
    ok = at_pair < len(codes)
    ok[ok] = ordered[at_pair[ok]] == found[ok]
    tf = np.bincount(doc[nxt[ok]] * len(codes) + order[at_pair[ok]],
                     minlength=len(got) * len(codes)).reshape(len(got), len(codes)).astype(np.float64)
    n = len(docnos)
    df = (tf > 0).sum(axis=0)
    idf = np.log1p((n - df + 0.5) / (df + 0.5))
    lengths = np.array([f.n_terms for _, f in got], dtype=np.float64)
    norm = k1 * (1 - b + b * lengths / max(lengths.mean(), 1.0))
    scores = (qtf * idf * tf * (k1 + 1) / (tf + norm[:, None])).sum(axis=1)
    for (d, _), v in zip(got, scores.tolist()):
        out[d] = v
    return out
