"""Fit the calibrated relevance (ldr/search/calibration.py) on development data and report how
well it is calibrated, out of fold.

For every query of a BEIR folder, the default search's top K hits give (features, relevant?):
features that depend on the query, the document and the index's statistics only, never on the
other candidates (BM25 over the query's highest attainable BM25, the dense cosine). A logistic
regression per feature set is fitted; 5-fold cross-validation grouped by relevant document (no
document's queries in both the fit and the scoring) gives the out-of-fold AUC, Brier score,
expected calibration error and the precision / recall at each threshold that the README quotes.

    python bench/fit_calibration.py --data ../shared/data/qmsum-train --index IDX [--write]

--write stores the coefficients fitted on all queries in ldr/search/calibration.json, one fit per
set of the kinds searched, with the models their scores came from (the exact-match floor is kept).
Choose --data among the development sets only; bench/fit_calibration.py checks a fit on the others.
"""
from __future__ import annotations

import argparse
import json
import sys
from itertools import combinations
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import ldr  # noqa: E402
from ldr.eval.beir import load_qrels, load_queries  # noqa: E402
from ldr.search import calibration  # noqa: E402

THRESHOLDS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


def collect(index: ldr.Index, queries: dict, qrels: dict, k: int):
    """(features by name → array, labels, query ids, group per row)"""
    rows, labels, qids = [], [], []
    kinds = index.retriever_names
    for qid, hits in index.search_many(queries, k=k, passages=0):
        if isinstance(hits, Exception):
            continue
        # the relevance stage's features (search/calibration.py), for every kind searched
        bounds = {n: b(queries[qid]) for n in kinds if (b := getattr(index.retriever(n), "bound", None))}
        for h in hits:
            rows.append(calibration.features({**hits.candidates.first_stage(h.docno), **h.scores}, bounds, kinds))
            labels.append(1 if qrels.get(qid, {}).get(h.id, 0) > 0 else 0)
            qids.append(qid)
    names = sorted({n for r in rows for n in r})
    X = {n: np.asarray([r.get(n, 0.0) for r in rows]) for n in names}
    return X, np.asarray(labels), np.asarray(qids)


def fit_logistic(X: np.ndarray, y: np.ndarray, l2: float = 1e-3, iters: int = 50) -> np.ndarray:
    """Newton's method on the L2-regularised log loss; returns [intercept, weights...]."""
    A = np.hstack([np.ones((len(X), 1)), X])
    w = np.zeros(A.shape[1])
    for _ in range(iters):
        p = 1 / (1 + np.exp(-A @ w))
        g = A.T @ (p - y) + l2 * np.r_[0, w[1:]]
        H = (A * (p * (1 - p))[:, None]).T @ A + l2 * np.diag(np.r_[0, np.ones(len(w) - 1)])
        step = np.linalg.solve(H, g)
        w -= step
        if np.abs(step).max() < 1e-9:
            break
    return w


def predict(w: np.ndarray, X: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-(w[0] + X @ w[1:])))


def auc(y, p) -> float:
    order = np.argsort(p)
    ranks = np.empty(len(p))
    ranks[order] = np.arange(1, len(p) + 1)
    pos = y == 1
    return float((ranks[pos].sum() - pos.sum() * (pos.sum() + 1) / 2) / (pos.sum() * (~pos).sum()))


def ece(y, p, bins: int = 10) -> float:
    edges = np.linspace(0, 1, bins + 1)
    at = np.clip(np.digitize(p, edges) - 1, 0, bins - 1)
    return float(sum(abs(y[at == b].mean() - p[at == b].mean()) * (at == b).mean() for b in range(bins) if (at == b).any()))


def out_of_fold(X, y, groups, folds: int = 5, seed: int = 0) -> np.ndarray:
    uniq = np.unique(groups)
    rng = np.random.default_rng(seed)
    fold_of = dict(zip(rng.permutation(uniq), np.arange(len(uniq)) % folds))
    f = np.asarray([fold_of[g] for g in groups])
    p = np.zeros(len(y))
    for i in range(folds):
        w = fit_logistic(X[f != i], y[f != i])
        p[f == i] = predict(w, X[f == i])
    return p


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--index", required=True, help="an index of the folder's corpus (ldr eval's cache holds one)")
    ap.add_argument("--split", default="test")
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--write", action="store_true")
    a = ap.parse_args()
    queries, qrels = load_queries(Path(a.data)), load_qrels(Path(a.data), a.split)
    queries = {q: t for q, t in queries.items() if q in qrels}
    index = ldr.open(a.index)
    X, y, qids = collect(index, queries, qrels, a.k)
    # folds by relevant document: every query of a meeting / article on one side
    first_rel = {q: sorted(d for d, r in rels.items() if r > 0)[0] for q, rels in qrels.items() if any(rels.values())}
    groups = np.asarray([first_rel.get(q, q) for q in qids])
    n_rel = sum(1 for rels in qrels.values() for r in rels.values() if r > 0)
    components = index.info()["components"]
    print(f"{a.data}: {len(queries)} queries, top {a.k} of the default search: {len(y)} hits, {y.sum()} relevant "
          f"({n_rel} relevant pairs in the qrels); models {calibration.models(components, list(X))}")
    fitted = []
    for r in range(len(X), 0, -1):
        for kinds in combinations(sorted(X), r):
            M = np.column_stack([X[n] for n in kinds])
            p = out_of_fold(M, y, groups)
            w = fit_logistic(M, y)
            oof = {"auc": round(auc(y, p), 4), "brier": round(float(((p - y) ** 2).mean()), 4), "ece": round(ece(y, p), 4)}
            fitted.append({"models": calibration.models(components, kinds), "intercept": float(w[0]),
                           "weights": dict(zip(kinds, map(float, w[1:]))), "oof": oof,
                           "data": Path(a.data).name, "k": a.k, "queries": len(queries)})
            print(f"\n{'+'.join(kinds)}: out-of-fold AUC {oof['auc']:.3f}, Brier {oof['brier']:.4f}, "
                  f"ECE {oof['ece']:.4f}; coefficients {np.round(w, 3).tolist()}")
            print("| min_score | hits kept per query | precision | recall |\n|---|---|---|---|")
            for t in THRESHOLDS:
                kept = p >= t
                prec = f"{y[kept].mean():.3f}" if kept.any() else "-"
                print(f"| {t:.1f} | {kept.sum() / len(queries):.2f} | {prec} | {y[kept].sum() / n_rel:.3f} |")
    if a.write:
        table = json.loads(calibration.TABLE.read_text()) if calibration.TABLE.is_file() else {"fits": []}
        key = lambda f: json.dumps(f["models"], sort_keys=True)      # noqa: E731
        mine = {key(f): f for f in table["fits"]}
        # a fit reading no model (BM25 alone) serves every index: the first data it was fitted on keeps it
        keep = [f for f in fitted if any(f["models"].values()) or mine.get(key(f), {}).get("data") in (None, f["data"])]
        for f in fitted:
            if f not in keep:
                print(f"kept the {'+'.join(f['models'])} fit made on {mine[key(f)]['data']}")
        table["fits"] = [f for f in table["fits"] if key(f) not in {key(g) for g in keep}] + keep
        calibration.TABLE.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
        print(f"\nwritten to {calibration.TABLE}")


if __name__ == "__main__":
    main()
