"""One leg of the default fusion swapped for another model's run (e.g. bge-small in place of
MiniLM as the dense leg), on qmsum-train: nDCG@10 alone and fused, paired t-test.

    python bench/leg_swap.py --runs EVAL/runs --swap dense=OTHER_EVAL/runs [--weights 0.25,0.5]

Both run folders are `ldr eval --bench beir` outputs on the same data (depth 1000); the legs are
fused with ldr.search.fusion.fuse exactly as a search does."""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "qmsum-train"


def load(folder: Path, stage: str) -> dict:
    out: dict = {}
    for line in open(next(Path(folder).glob(f"*.{stage}.trec"))):
        q, _, d, _, s, _ = line.split()
        out.setdefault(q, {})[d] = float(s)
    return out


def main() -> None:
    from scipy.stats import ttest_rel

    from ldr.search.fusion import fuse

    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", required=True)
    ap.add_argument("--swap", required=True, help="LEG=RUNS_FOLDER")
    ap.add_argument("--data", default=str(DATA))
    ap.add_argument("--weights", default="0.25,0.5")
    a = ap.parse_args()
    leg, other = a.swap.split("=", 1)
    qrels: dict = {}
    for line in list(open(next((Path(a.data) / "qrels").glob("*.tsv"))))[1:]:
        q, d, s = line.split("\t")[:3]
        qrels.setdefault(q, {})[d] = int(s)

    def ndcg(scores, rel):
        ranked = sorted(scores, key=lambda d: (-scores[d], d))
        g = sum((2 ** rel.get(d, 0) - 1) / np.log2(i + 2) for i, d in enumerate(ranked[:10]))
        ideal = sorted(rel.values(), reverse=True)[:10]
        return g / sum((2 ** x - 1) / np.log2(i + 2) for i, x in enumerate(ideal))

    legs = {s: load(Path(a.runs), s) for s in ("bm25", "dense", "sparse")}
    new = load(Path(other), leg)
    qids = [q for q in qrels if q in legs["bm25"]]
    base_w = {"bm25": 1.0, "dense": 0.25, "sparse": 0.25}
    res = {"fused (default)": [ndcg(fuse({k: legs[k].get(q, {}) for k in legs}, "minmax", base_w), qrels[q]) for q in qids],
           f"{leg} alone (default)": [ndcg(legs[leg].get(q, {}), qrels[q]) for q in qids],
           f"{leg} alone (swapped)": [ndcg(new.get(q, {}), qrels[q]) for q in qids]}
    for w in map(float, a.weights.split(",")):
        res[f"fused, {leg} swapped, w={w:g}"] = [
            ndcg(fuse({**{k: legs[k].get(q, {}) for k in legs}, leg: new.get(q, {})}, "minmax", {**base_w, leg: w}),
                 qrels[q]) for q in qids]
    base = np.array(res["fused (default)"])
    print(f"qmsum-train, {len(qids)} queries; nDCG@10, paired t-test against the default fused list")
    for k, v in res.items():
        v = np.array(v)
        p = ttest_rel(v, base).pvalue if np.any(v != base) else 1.0
        print(f"{k:<34}{100 * v.mean():7.2f}{100 * (v.mean() - base.mean()):+7.2f}   p={p:.4f}")


if __name__ == "__main__":
    main()
