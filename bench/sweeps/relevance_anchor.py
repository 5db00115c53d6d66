"""Is the packaged cross-encoder's logit an anchor for the relevance of small indexes? (issue 78;
answer measured 2026-11-29: no, docs/findings.md)

Sub-corpora of 1-40 documents (3 draws a size, `bench_relevance_small.py`'s) and the whole index,
each asked up to 10 queries it answers and as many it does not; the default search's top 3 hits,
each with its best passage. The cross-encoder (ms-marco MiniLM-L12, int8, 512 tokens) scores
(query, passage). A logistic fit on the logit, alone, beside the shipped relevance's logit, and with
log(documents), fitted on three datasets and scored on the fourth: per group (dataset x size x
answered) |mean top-1 relevance - top-1 accuracy| + ECE, against the shipped estimate. Also the
logit's AUC for the top hit's relevance, and its time a query. Rows are cached in /tmp.

    python bench/sweeps/relevance_anchor.py --set qmsum-train=IDX:DATA --set legal=... --set ...
"""
import argparse, math, os, pickle, random, sys, time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench_relevance_small import judged, sub_corpora  # noqa: E402
from ldr.eval.relevance_fit import ece  # noqa: E402

SEEDS, PER, K = 3, 10, 3


def collect(name: str, idx: str, data: str) -> list[dict]:
    cache = f"/tmp/relevance-anchor-{name}.pkl"
    if os.path.exists(cache):
        return pickle.load(open(cache, "rb"))
    queries, qrels = judged(Path(data))
    rows = []
    for unanswered in (False, True):
        gens = [sub_corpora(idx, queries, qrels, [1, 3, 10, 25, 40], SEEDS, unanswered)]
        gens += [] if unanswered else [sub_corpora(idx, queries, qrels, [10**9], 1)]
        for size, seed, sub, qids in (d for g in gens for d in g):
            for q in random.Random(f"{name}{size}{seed}{unanswered}").sample(qids, min(PER, len(qids))):
                for rank, h in enumerate(sub.search(queries[q], k=K, passages=1)):
                    rows.append(dict(data=name, size=len(sub), asked=unanswered, qid=q, seed=seed, rank=rank,
                                     query=queries[q], passage=h.passages[0].text if h.passages else " ",
                                     shipped=float(h.relevance), y=int(qrels[q].get(h.id, 0) > 0)))
    from ldr.rerank.cross_encoder import CrossEncoderReranker, CrossEncoderSettings
    ce = CrossEncoderReranker(CrossEncoderSettings(model="ms-marco-minilm-l12"))
    by: dict = {}
    for i, r in enumerate(rows):
        by.setdefault((r["size"], r["seed"], r["asked"], r["qid"]), []).append(i)
    for idxs in by.values():
        ps = [rows[i]["passage"] for i in idxs]
        t = time.perf_counter()
        for i, v in zip(idxs, ce.score(rows[idxs[0]]["query"], ps, passages=[[p] for p in ps])):
            rows[i]["ce"], rows[i]["ce_s"] = float(v), time.perf_counter() - t
    pickle.dump(rows, open(cache, "wb"))
    return rows


def logit(p: float) -> float:
    p = min(max(p, 1e-4), 1 - 1e-4)
    return math.log(p / (1 - p))


FEATURES = {"ce": lambda r: [r["ce"]], "ce + shipped": lambda r: [r["ce"], logit(r["shipped"])],
            "ce + shipped + log n": lambda r: [r["ce"], logit(r["shipped"]), math.log(r["size"])]}


def fit(rows, feats, l2=1e-2):
    x = np.array([feats(r) + [1.0] for r in rows])
    y = np.array([r["y"] for r in rows], float)
    w = np.zeros(x.shape[1])
    for _ in range(50):                                   # Newton's steps on the ridge-penalised log loss
        p = 1 / (1 + np.exp(-x @ w))
        w -= np.linalg.solve((x.T * (p * (1 - p))) @ x + l2 * np.eye(len(w)), x.T @ (p - y) + l2 * w)
    return w


def score(rows, pred) -> tuple[float, float]:
    groups: dict = {}
    for r, p in zip(rows, pred):
        groups.setdefault((r["data"], min(r["size"], 10**9 if r["size"] > 40 else r["size"]), r["asked"]), []).append((r, p))
    got = {False: [], True: []}
    for (_, _, asked), rp in groups.items():
        y, p = np.array([r["y"] for r, _ in rp]), np.array([p for _, p in rp])
        top = np.array([r["rank"] == 0 for r, _ in rp])
        got[asked].append(abs(p[top].mean() - y[top].mean()) + ece(p, y))
    return float(np.mean(got[False])), float(np.mean(got[True]))


def main():
    from sklearn.metrics import roc_auc_score

    ap = argparse.ArgumentParser()
    ap.add_argument("--set", action="append", required=True, help="NAME=INDEX:DATA")
    a = ap.parse_args()
    rows, names = [], []
    for spec in a.set:
        name, rest = spec.split("=", 1)
        rows += collect(name, *rest.split(":", 1))
        names.append(name)
    for n in names:
        top = [r for r in rows if r["data"] == n and r["rank"] == 0 and r["size"] <= 40]
        y = [r["y"] for r in top]
        secs = sorted({(r["qid"], r["size"], r["seed"], r["asked"]): r["ce_s"] for r in rows if r["data"] == n}.values())
        print(f"{n}: top-hit AUC cross-encoder {roc_auc_score(y, [r['ce'] for r in top]):.3f}, shipped "
              f"{roc_auc_score(y, [r['shipped'] for r in top]):.3f}; logit median relevant "
              f"{np.median([r['ce'] for r in top if r['y']]):.2f}, not {np.median([r['ce'] for r in top if not r['y']]):.2f}; "
              f"{K} pairs {1000 * secs[len(secs) // 2]:.0f} ms a query")
    print("estimate | mean |gap| + ECE, answered / unanswered groups (held out by dataset)")
    print("shipped | %.3f / %.3f" % score(rows, [r["shipped"] for r in rows]))
    for label, feats in FEATURES.items():
        pred = np.zeros(len(rows))
        for held in names:
            w = fit([r for r in rows if r["data"] != held], feats)
            for i, r in enumerate(rows):
                if r["data"] == held:
                    pred[i] = 1 / (1 + math.exp(-np.dot(feats(r) + [1.0], w)))
        print(f"{label} | %.3f / %.3f" % score(rows, pred))


if __name__ == "__main__":
    main()
