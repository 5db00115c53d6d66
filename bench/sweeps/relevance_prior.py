"""Can the query fit serve small indexes? (issue 78; answer measured 2026-11-29: no, bench/README.md)

Under calibration.min_docs() documents the first estimate applies and under-states right answers.
Tried here: the query fit (BM25 as a z-score in the query's scores over the index, its share of
the best, the window cover; the shipped weights) from one document up, its z-score taken among
the *other* documents (the document's own score bounds its z by sqrt(n - 1)) with their mean and
spread drawn towards a prior of k pseudo-documents scoring a·max with spread b·max.

Sub-corpora of 1-40 documents and the whole index (bench/bench_relevance_small.py's draws) are
asked the queries they answer and as many they do not; each returned hit keeps its raw BM25
distribution (n, sum, sumsq, max), so every prior is scored offline: per group the gap between
mean top-1 relevance and top-1 accuracy, and ECE. Printed: each prior's mean |gap| + ECE over
the answered groups and over the unanswered ones, against the shipped estimate. Rows are cached.

    python bench/sweeps/relevance_prior.py --set qmsum-train=IDX:DATA --set ... [--seeds 5]
"""
import argparse, math, os, pickle, sys
from pathlib import Path
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench_relevance_small import judged, sub_corpora  # noqa: E402
from ldr.eval.relevance_fit import ece  # noqa: E402
from ldr.search import calibration  # noqa: E402
from ldr.search.stages import relevance as stage  # noqa: E402

SIZES = [1, 2, 3, 5, 10, 25, 40, 10**9]
GRID = [(0, 0.0, 0.0)] + [(k, a, b) for k in (1, 3, 10, 30, 100) for a in (0.1, 0.2, 0.3, 0.5) for b in (0.1, 0.15, 0.2, 0.3)]


def z_among_others(s, d, k, a, b):
    others = d["n"] - 1
    if others + k <= 0:
        return 0.0
    rest, rest_sq, top = d["sum"] - s, d["sumsq"] - s * s, d["max"]
    mean = (rest + k * a * top) / (others + k)
    spread = (rest_sq - rest * rest / others if others > 0 else 0.0) + k * (b * top) ** 2
    return (s - mean) / (math.sqrt(max(spread, 0.0) / (others + k)) or 1.0)


def collect(name, idx, data, seeds, unanswered):
    cache = f"/tmp/relevance-prior-{name}-{seeds}-{int(unanswered)}.pkl"
    if os.path.exists(cache):
        return pickle.load(open(cache, "rb"))
    real_min, real_features = calibration.min_docs, calibration.query_features
    calibration.min_docs = lambda: 0              # the query fit's features at every size

    def raw(fit, scores, dists, cover):          # the features, and what any prior needs
        x = real_features(fit, scores, dists, cover)
        d = dists.get("bm25")
        return x and d and dict(x, _s=float(scores.get("bm25", 0.0)), **{"_" + k: d[k] for k in ("n", "sum", "sumsq", "max")})

    real_estimate = stage.Relevance._estimate

    def both(self, scores, dists, cover, bounds, use_query):     # the first estimate beside it
        p, x, used = real_estimate(self, scores, dists, cover, bounds, use_query)
        first = self.fit and calibration.relevance(calibration.features(scores, bounds, self.names), self.fit)
        return p, dict(x, _first=first), used

    calibration.query_features, stage.Relevance._estimate = raw, both
    queries, qrels = judged(Path(data))
    rows = []
    try:
        # the sub-corpora, then the whole index once (it answers every query: no unanswered draw)
        draws = [sub_corpora(idx, queries, qrels, SIZES[:-1], seeds, unanswered)]
        draws += [] if unanswered else [sub_corpora(idx, queries, qrels, SIZES[-1:], 1)]
        for size, seed, sub, qids in (d for g in draws for d in g):
            docs = len(sub)
            for q in qids:
                exact = calibration.is_exact(queries[q], 1.0)
                for rank, h in enumerate(sub.search(queries[q], k=20)):
                    s = {k.split(".", 1)[1]: v for k, v in h.scores.items() if k.startswith("relevance.")}
                    if "_s" in s:
                        rows.append(dict(s, data=name, size=docs, rank=rank, exact=exact, asked=unanswered,
                                         shipped=h.relevance if docs >= real_min() else s.get("_first"),
                                         y=int(qrels[q].get(h.id, 0) > 0)))
            print(name, size, seed, len(qids), "queries", flush=True)
    finally:
        calibration.min_docs, calibration.query_features = real_min, real_features
        stage.Relevance._estimate = real_estimate
    pickle.dump(rows, open(cache, "wb"))
    return rows


def estimate(r, prior):
    if prior == "shipped":
        return r["shipped"]
    fit = calibration.table()["query_fits"][0]
    d = {"n": r["_n"], "sum": r["_sum"], "sumsq": r["_sumsq"], "max": r["_max"]}
    x = {"bm25.z": z_among_others(r["_s"], d, *prior), "bm25.best": r["_s"] / r["_max"] if r["_max"] > 0 else 0.0,
         "cover": r["cover"]}
    p = calibration.relevance(x, fit)
    return max(p, calibration.exact()["p"]) if r["exact"] and r["cover"] >= 1.0 else p


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--set", action="append", required=True)
    ap.add_argument("--seeds", type=int, default=5)
    a = ap.parse_args()
    rows = []
    for spec in a.set:
        name, rest = spec.split("=", 1)
        idx, data = rest.split(":", 1)
        for unanswered in (False, True):
            rows += collect(name, idx, data, a.seeds, unanswered)
    groups = {}
    for r in rows:
        groups.setdefault((r["data"], r["size"], r["asked"]), []).append(r)
    print("prior (k, a, b) | mean |gap| + ECE: answered / unanswered groups")
    for prior in ["shipped"] + GRID:
        got = {False: [], True: []}
        for (name, size, asked), rs in groups.items():
            y = np.array([r["y"] for r in rs])
            top = np.array([r["rank"] == 0 for r in rs])
            p = np.array([estimate(r, prior) for r in rs])
            got[asked].append(abs(p[top].mean() - y[top].mean()) + ece(p, y))
        print(f"{str(prior):18s} {np.mean(got[False]):.3f} / {np.mean(got[True]):.3f}", flush=True)


if __name__ == "__main__":
    main()
