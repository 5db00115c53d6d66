"""One leg of the default fusion swapped for another model's run (e.g. bge-small in place of
MiniLM as the dense leg), on qmsum-train: nDCG@10 alone and fused, paired t-test.

    python bench/sweeps/leg_swap.py --runs EVAL/runs --swap dense=OTHER_EVAL/runs [--weights 0.25,0.5]

Both run folders are `ldr eval --bench beir` outputs on the same data (depth 1000); the legs are
fused with ldr.search.fusion.fuse exactly as a search does."""
from __future__ import annotations

import sys
import argparse
from pathlib import Path

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))   # bench/: the helpers the sweeps share
from qmsum_eval import DATA, load_run as load, ndcg10, print_paired, qrels as read_qrels, rank  # noqa: E402


def main() -> None:
    from ldr.search.fusion import fuse

    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", required=True)
    ap.add_argument("--swap", required=True, help="LEG=RUNS_FOLDER")
    ap.add_argument("--data", default=str(DATA))
    ap.add_argument("--weights", default="0.25,0.5")
    a = ap.parse_args()
    leg, other = a.swap.split("=", 1)
    qrels = read_qrels(Path(a.data))

    def ndcg(scores, rel):
        return ndcg10(rank(scores), rel)

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
    print(f"qmsum-train, {len(qids)} queries; nDCG@10, paired t-test against the default fused list")
    print_paired(res, "fused (default)", 34)

if __name__ == "__main__":
    main()
