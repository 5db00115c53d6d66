"""The window stage's aspect evidence (ldr/search/aspects.py): its weight by 5-fold CV grouped by
relevant document, each weight's nDCG@10 and top-1 accuracy, the index's default search
reproduced and its time against the same search without the aspects.

    python bench/sweeps/aspect_sweep.py --index IDX --data ../shared/data/qmsum-train

Each query is searched twice (aspect_weight 0: the window stage's score before the aspects;
aspect_weight 1: the aspects' raw sum for every rescored candidate); each weight's mix is then
formed as the stage forms it. Queries of fewer than two aspects get none, as in the stage.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))   # bench/: the helpers the sweeps share
from qmsum_eval import cross_validate, judged, last_mix, last_mix_rows, ndcg10  # noqa: E402

WEIGHTS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--index", required=True)
    ap.add_argument("--data", required=True, type=Path)
    ap.add_argument("--depth", type=int, default=50, help="the window stage's depth (the index's default: 50)")
    ap.add_argument("--timed", type=int, default=300, help="queries timed with and without the aspects")
    a = ap.parse_args()
    import ldr
    from scipy import stats

    idx = ldr.open(a.index)
    qrels, queries = judged(a.data)
    qids = sorted(queries)
    default = []
    rows = last_mix_rows(idx, queries, "aspect_weight", "windows.aspects", a.depth, each=lambda q: default.append(
        ndcg10([h.id for h in idx.search(queries[q], k=a.depth, relevance=False, passages=0)][:10], qrels[q])))
    run = lambda q, u: last_mix(rows[q], u)

    # its cost: the default search (k 10, as a user asks) with and without the aspects, each query's
    # candidates already analysed, the order alternated query by query
    took: dict = {0: [], None: []}
    for i, q in enumerate(qids[:a.timed]):
        for u in ((0, None) if i % 2 else (None, 0)):
            t = time.perf_counter()
            idx.search(queries[q], k=10, **({} if u is None else {"aspect_weight": u}))
            took[u].append(time.perf_counter() - t)

    scores = {u: np.array([ndcg10(run(q, u), qrels[q]) for q in qids]) for u in WEIGHTS}
    print(f"{sum(r[3] for r in rows.values())} of {len(qids)} queries hold two aspects or more")
    for u in WEIGHTS:
        p = stats.ttest_rel(scores[u], scores[0.0]).pvalue if u else float("nan")
        top1 = np.mean([run(q, u)[0] in qrels[q] for q in qids])
        print(f"aspect_weight {u:<4g} nDCG@10 {100 * scores[u].mean():.2f}  ({100 * (scores[u].mean() - scores[0.0].mean()):+.2f}, "
              f"p {p:.2g})  top-1 right {100 * top1:.1f}%")
    groups = [next(iter(qrels[q])) for q in qids]
    held, picks = cross_validate(scores, groups)
    print(f"5-fold CV grouped by relevant document: {100 * held.mean():.2f} against {100 * scores[0.0].mean():.2f} "
          f"(p {stats.ttest_rel(held, scores[0.0]).pvalue:.2g}); picks {picks}")
    print(f"the index's default search: {100 * np.mean(default):.2f}")
    print(f"warm default search p50 (top 10, {len(took[0])} queries): {1e3 * np.median(took[None]):.1f} ms against "
          f"{1e3 * np.median(took[0]):.1f} ms without the aspects (the same process, alternated)")


if __name__ == "__main__":
    main()
