"""The index's relevance fitted on your labels (`ldr tune --relevance`, issue 78).

No estimate built from the query, the document and the index alone is calibrated on every corpus
(bench/README.md: families of near-identical pages over-state, small indexes under-state). With
judged queries, the shipped estimate p of each of the default search's top `k` hits is recalibrated
on them: P(relevant) = sigmoid(a·logit(p) + b + Σ w·x), Platt's scaling plus the estimate's own
features x (the query's BM25 z-score over the index, its share of the best score, the window
cover; or each kind's score over its bound), fitted by Newton's method with a ridge towards the
shipped estimate (a = 1, nothing added): a few dozen queries move it where the corpus says. The fit is checked by 5-fold cross-validation grouped by query (ECE, Brier,
against the shipped estimate on the same hits), and `min_score` is the lowest cut whose kept
out-of-fold hits are relevant at least `precision` of the time with `confidence` (a one-sided
Clopper-Pearson bound): a stated guarantee on the user's own labels, or, where they are too few
to give it, the cut that comes closest, with the confidence it has.

The fit names the estimate it recalibrates ("query": the query fit, "first": the first fit; the
relevance stage applies it only there) and its data; `Index.set_search_defaults` stores it in a
new generation, where every interface's plan reads it.
"""
from __future__ import annotations

import random
from datetime import datetime, timezone

import numpy as np

EPS = 1e-4
RIDGE = 5.0             # pseudo-observations holding a and b at the shipped estimate's
FEATURE_RIDGE = 20.0    # ... and each standardised feature's weight at 0
BINS = 10


def logit(p: np.ndarray) -> np.ndarray:
    p = np.clip(np.asarray(p, dtype=np.float64), EPS, 1 - EPS)
    return np.log(p / (1 - p))


def design(rows: dict, names: list[str]) -> np.ndarray:
    """[logit(shipped p), 1, each feature of the estimate]."""
    return np.column_stack([logit(rows["p"]), np.ones(len(rows["p"]))] + [rows["x"][:, j] for j in range(len(names))])


def logistic(X: np.ndarray, y: np.ndarray, iters: int = 60) -> np.ndarray:
    """Weights minimising the log loss of sigmoid(X·w) against y plus a ridge towards the shipped
    estimate (w = [1, 0, 0...]: a = 1 on its logit, nothing added), the features standardised
    under it: the ridge is a fixed number of pseudo-observations, so ten judged queries move the
    estimate a little and eighty move it where they say (RIDGE, FEATURE_RIDGE: chosen on manpages
    and qmsum-train, bench/bench_relevance_labels.py)."""
    y = np.asarray(y, dtype=np.float64)
    scale = X.std(axis=0)
    scale[:2] = 1.0
    scale[scale == 0] = 1.0
    Z = X / scale
    prior = np.zeros(X.shape[1])
    prior[0] = 1.0
    ridge = np.diag([RIDGE, RIDGE] + [FEATURE_RIDGE] * (X.shape[1] - 2))

    def loss(w: np.ndarray) -> float:
        z = Z @ w
        return float(np.sum(np.logaddexp(0, z) - y * z) + 0.5 * (w - prior) @ ridge @ (w - prior))

    w = prior.copy()
    for _ in range(iters):
        q = 1 / (1 + np.exp(-np.clip(Z @ w, -30, 30)))
        grad = Z.T @ (q - y) + ridge @ (w - prior)
        hess = (Z * (q * (1 - q))[:, None]).T @ Z + ridge
        step = np.linalg.solve(hess, grad)
        # Newton's full step overshoots where the hits nearly separate (a draw of 80 man-bundles
        # queries went to weights of 1,600 and an ECE of 0.81): halve it until the loss falls
        t, before = 1.0, loss(w)
        while t > 1e-6 and loss(w - t * step) > before:
            t /= 2
        w = w - t * step
        if np.abs(t * step).max() < 1e-9:
            break
    return w / scale


def dominant(rows: dict) -> dict:
    """The rows of the estimate most hits got (a recalibration fits one estimate's scale)."""
    est = rows["estimate"]
    if len(est) == 0:
        return rows
    names, counts = np.unique(est, return_counts=True)
    keep = est == names[int(np.argmax(counts))]
    out = {k: v[keep] for k, v in rows.items() if k != "names"}
    # the features this estimate gives every row (the other estimate's are absent: 0 throughout)
    used = [j for j in range(out["x"].shape[1]) if np.any(out["x"][:, j] != 0)]
    out["x"], out["names"] = out["x"][:, used], [rows["names"][j] for j in used]
    return out


def ece(p: np.ndarray, y: np.ndarray, bins: int = BINS) -> float:
    """Expected calibration error over equal-width bins of the estimate."""
    p, y = np.asarray(p, float), np.asarray(y, float)
    idx = np.minimum((p * bins).astype(int), bins - 1)
    return float(sum(abs(p[idx == b].mean() - y[idx == b].mean()) * (idx == b).sum()
                     for b in range(bins) if (idx == b).any()) / max(len(p), 1))


def confidence_of(kept: int, right: int, precision: float) -> float:
    """The confidence that hits like these are relevant at least `precision` of the time: the
    largest c whose one-sided Clopper-Pearson lower bound of right/kept is at least `precision`."""
    from scipy.stats import beta

    return 0.0 if right == 0 else float(beta.sf(precision, right, kept - right + 1))


def cut(p: np.ndarray, y: np.ndarray, precision: float, confidence: float) -> dict | None:
    """The lowest threshold whose kept hits are relevant at least `precision` of the time with
    `confidence` ("certified"); where no threshold reaches it (too few judged hits at the top), the
    threshold of the highest confidence among those whose kept hits reach `precision`, saying so."""
    options = []
    for t in np.round(np.arange(0.99, 0.0, -0.01), 2):
        keep = p >= t
        n, r = int(keep.sum()), int(y[keep].sum())
        if n:
            options.append({"threshold": float(t), "kept": n, "right": r, "precision": r / n,
                            "recall": r / max(int(y.sum()), 1), "confidence": confidence_of(n, r, precision)})
    sure = [o for o in options if o["confidence"] >= confidence]
    if sure:
        return dict(sure[-1], certified=True)
    reach = [o for o in options if o["precision"] >= precision]
    return dict(max(reach, key=lambda o: (o["confidence"], -o["threshold"])), certified=False) if reach else None


def collect(index, queries: dict[str, str], qrels: dict[str, dict[str, int]], qids: list[str], k: int = 20,
            progress: bool = False) -> dict:
    """The shipped estimate of each of the default search's top `k` hits, their labels, their
    query, and which estimate applied ("query" or "first")."""
    from tqdm.auto import tqdm

    rows = {"p": [], "y": [], "q": [], "estimate": [], "x": []}
    got = index.search_many({q: queries[q] for q in qids}, k=k, passages=0, with_meta=False, relevance=True)
    for qid, result in tqdm(got, total=len(qids), desc="the relevance of judged queries", unit="query",
                            disable=not progress, leave=False):
        if isinstance(result, Exception):
            continue
        for h in result:
            p = h.scores.get("relevance")
            if p is None:
                continue
            rows["p"].append(float(h.scores.get("relevance.shipped", p)))
            rows["y"].append(int(qrels.get(qid, {}).get(h.id, 0) > 0))
            rows["q"].append(qid)
            rows["x"].append({n[len("relevance."):]: v for n, v in h.scores.items()
                              if n.startswith("relevance.") and n != "relevance.shipped"})
            # the query fit's features are z-scores over the index (`<kind>.z`); the first fit's are not
            rows["estimate"].append("query" if any(n.startswith("relevance.") and n.endswith(".z") for n in h.scores)
                                    else "first")
    names = sorted({n for x in rows["x"] for n in x})
    rows["x"] = np.array([[x.get(n, 0.0) for n in names] for x in rows["x"]], dtype=np.float64).reshape(-1, len(names))
    out = {key: np.asarray(v) for key, v in rows.items()}
    out["names"] = names
    return out


def fit(rows: dict, precision: float = 0.8, confidence: float = 0.9, folds: int = 5, seed: int = 0) -> dict:
    """The recalibration fitted on every row, checked out of fold (grouped by query)."""
    p, y, q, names = rows["p"], rows["y"], rows["q"], rows["names"]
    if len(p) == 0:
        from ..errors import ConfigError
        raise ConfigError("no judged query's hits carry a relevance estimate: this index has none to fit "
                          "(`ldr info` says which models have one)")
    X = design(rows, names)
    queries = sorted(set(q.tolist()))
    random.Random(seed).shuffle(queries)
    fold_of = {qid: i % folds for i, qid in enumerate(queries)}
    f = np.array([fold_of[x] for x in q])
    oof = np.zeros(len(p))
    for i in range(min(folds, len(queries))):
        w = logistic(X[f != i], y[f != i])
        oof[f == i] = 1 / (1 + np.exp(-np.clip(X[f == i] @ w, -30, 30)))
    w = logistic(X, y)
    estimates = sorted(set(rows["estimate"].tolist()))
    return {"a": round(float(w[0]), 6), "b": round(float(w[1]), 6),
            "weights": {n: round(float(v), 6) for n, v in zip(names, w[2:])},
            "estimate": estimates[0] if len(estimates) == 1 else "query",
            "queries": len(queries), "hits": int(len(p)), "relevant": int(y.sum()),
            "ece": {"shipped": round(ece(p, y), 4), "cross_validated": round(ece(oof, y), 4)},
            "brier": {"shipped": round(float(((p - y) ** 2).mean()), 4),
                      "cross_validated": round(float(((oof - y) ** 2).mean()), 4)},
            "min_score": cut(oof, y, precision, confidence), "precision": precision, "confidence": confidence,
            "at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
