"""The cross-encoder as a second stage on qmsum-train: its score interpolated with the fused
score (z-normalised over the candidates, ldr.search.pipeline.mix) at several weights, against
the fused list, with paired tests. Chooses the default rerank_weight on this data only.

    python bench/sweeps/rerank_sweep.py --index CACHED_QMSUM_INDEX [--queries 150] [--depth 30] [--windows 2]

Cross-encoder scores are computed once per query (weight 1) and mixed offline for each weight.
Writes bench/figures/rerank_sweep.png and prints a table."""
from __future__ import annotations

import sys
import argparse
import time
from pathlib import Path

import numpy as np

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))   # bench/: the helpers the sweeps share
from qmsum_eval import DATA, load_run, ndcg10, print_paired, queries as read_queries, qrels as read_qrels, rank  # noqa: E402


def main() -> None:
    import ldr
    from scipy.stats import ttest_rel
    from ldr.search.pipeline import mix

    ap = argparse.ArgumentParser()
    ap.add_argument("--index", required=True)
    ap.add_argument("--data", default=str(DATA))
    ap.add_argument("--model", default="ms-marco-minilm-l12")
    ap.add_argument("--queries", type=int, default=150)
    ap.add_argument("--depth", type=int, default=30)
    ap.add_argument("--windows", type=int, default=2)
    ap.add_argument("--weights", default="0.1,0.2,0.3,0.4,0.5,0.7,1.0")
    ap.add_argument("--baseline", default=None, metavar="RUNS",
                    help="also compare with the fused stage of this `ldr eval` runs/ folder (e.g. today's default "
                         "index, when --index holds more legs)")
    a = ap.parse_args()
    data = Path(a.data)
    qrels = read_qrels(data)
    queries = [q for q in read_queries(data) if q["_id"] in qrels]
    step = max(1, len(queries) // a.queries)
    chosen = queries[::step][: a.queries]          # spread over the meetings, fixed
    idx = ldr.open(a.index)
    weights = [float(w) for w in a.weights.split(",")]
    per = {"fused": [], **{w: [] for w in weights}}
    base_run = load_run(Path(a.baseline), "fused") if a.baseline else None
    if base_run is not None:
        per["baseline"] = [ndcg10(rank(base_run.get(q["_id"], {})), qrels[q["_id"]]) for q in chosen]
    t0 = time.perf_counter()
    for i, q in enumerate(chosen):
        hits = idx.search(q["text"], k=a.depth, rerank_model=a.model, rerank_weight=1.0, rerank_depth=a.depth,
                          rerank_windows=a.windows, with_meta=False)
        ids = [h.id for h in hits]
        ce = np.array([h.scores["rerank"] for h in hits])
        first = np.array([h.scores["fused"] for h in hits])
        per["fused"].append(ndcg10([ids[j] for j in np.argsort(-first, kind="stable")], qrels[q["_id"]]))
        for w in weights:
            final = mix(ce, first, w)
            per[w].append(ndcg10([ids[j] for j in np.argsort(-final, kind="stable")], qrels[q["_id"]]))
        if (i + 1) % 10 == 0:
            print(f"{i + 1}/{len(chosen)} queries, {(time.perf_counter() - t0) / (i + 1):.1f} s/query", flush=True)
    secs = (time.perf_counter() - t0) / len(chosen)
    base = np.array(per["fused"])
    print(f"\n{len(chosen)} queries of qmsum-train, depth {a.depth}, {a.windows} windows/doc, {secs:.1f} s/query")
    print(f"{'stage':<16}{'nDCG@10':>9}{'Δ':>8}{'p (t-test)':>12}")
    print(f"{'fused':<16}{100 * base.mean():>9.2f}")
    rows = []
    for w in weights:
        v = np.array(per[w])
        p = ttest_rel(v, base).pvalue if np.any(v != base) else 1.0
        rows.append((w, 100 * v.mean(), 100 * (v.mean() - base.mean()), p))
        print(f"{'rerank w=' + str(w):<16}{100 * v.mean():>9.2f}{rows[-1][2]:>+8.2f}{p:>12.4f}")
    if base_run is not None:
        print(f"\nagainst the fused stage of {a.baseline}:")
        print_paired({"baseline fused": per["baseline"], "fused (this index)": per["fused"],
                      **{f"rerank w={w}": per[w] for w in weights}}, "baseline fused")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot([r[0] for r in rows], [r[1] for r in rows], "o-", label=f"fused + {a.model}")
    ax.axhline(100 * base.mean(), color="grey", ls="--", label="fused")
    ax.set_xlabel("cross-encoder weight (rerank_weight)")
    ax.set_ylabel("nDCG@10")
    ax.set_title(f"qmsum-train, {len(chosen)} queries, top-{a.depth} reranked")
    ax.legend(fontsize=8)
    fig.tight_layout()
    out = Path(__file__).resolve().parents[1] / "figures" / "rerank_sweep.png"
    fig.savefig(out, dpi=120)
    print(f"written {out}")


if __name__ == "__main__":
    main()
