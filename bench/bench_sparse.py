"""Learned-sparse retrieval: ldr's inverted index (query terms only, mmap'd .npy) vs a brute-force
scipy CSR × query product, on synthetic documents (10k, 100k, 1M), same queries, same run.

Synthetic: term ids drawn Zipf-like over a 30522-term vocabulary (SPLADE's), 128 terms per
document, 24 terms per query, weights log-normal. Exactness is checked on every query.

    python bench/bench_sparse.py [--sizes 10000,100000,1000000]
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from ldr.components.sparse_store import SparseIndex

VOCAB, TERMS, QTERMS = 30522, 128, 24


def zipf_terms(rng, n, k):
    p = 1.0 / np.arange(1, VOCAB + 1) ** 0.8
    p /= p.sum()
    out = np.empty((n, k), dtype=np.int32)
    for i in range(0, n, 10000):
        m = min(10000, n - i)
        cand = rng.choice(VOCAB, size=(m, k * 2), p=p)
        for j in range(m):
            u = np.unique(cand[j])[:k]
            if len(u) < k:
                u = np.unique(np.concatenate([u, rng.choice(VOCAB, k * 2, replace=False)]))[:k]
            out[i + j] = np.sort(u)
    return out


def build(n, rng, path: Path):
    terms = zipf_terms(rng, n, TERMS)
    weights = rng.lognormal(0, 0.5, size=terms.shape).astype(np.float32)
    indptr = np.arange(0, n * TERMS + 1, TERMS, dtype=np.int64)
    csr = sp.csr_matrix((weights.ravel(), terms.ravel(), indptr), shape=(n, VOCAB))
    csc = csr.tocsc()
    path.mkdir(parents=True, exist_ok=True)
    for name, arr in (("doc_indptr", indptr), ("doc_terms", terms.ravel()), ("doc_weights", weights.ravel()),
                      ("term_indptr", csc.indptr.astype(np.int64)), ("term_docs", csc.indices.astype(np.int32)),
                      ("term_weights", csc.data.astype(np.float32))):
        np.save(path / f"{name}.npy", arr)
    return csr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--queries", type=int, default=200)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    print("| docs | postings | ldr q/s | scipy CSR q/s | speed-up | exact |")
    print("|---|---|---|---|---|---|")
    for n in [int(x) for x in args.sizes.split(",")]:
        with tempfile.TemporaryDirectory() as tmp:
            csr = build(n, rng, Path(tmp))
            idx = SparseIndex(Path(tmp))
            qs = [(np.sort(rng.choice(VOCAB // 10, QTERMS, replace=False)), rng.lognormal(0, .5, QTERMS).astype(np.float32))
                  for _ in range(args.queries)]
            idx.top_k(*qs[0], 10)
            t = time.perf_counter()
            ours = [idx.top_k(qt, qw, 10) for qt, qw in qs]
            t_ours = time.perf_counter() - t
            t = time.perf_counter()
            exact = True
            for (qt, qw), mine in zip(qs, ours):
                q = sp.csr_matrix((qw, qt, [0, len(qt)]), shape=(1, VOCAB))
                scores = (csr @ q.T).toarray().ravel()
                top = np.argsort(-scores, kind="stable")[:10]
                exact &= np.allclose(scores[top], [s for _, s in mine], rtol=1e-5)
            t_scipy = time.perf_counter() - t
            print(f"| {n:,} | {csr.nnz:,} | {len(qs) / t_ours:.0f} | {len(qs) / t_scipy:.0f} | "
                  f"{t_scipy / t_ours:.1f}x | {exact} |", flush=True)


if __name__ == "__main__":
    main()
