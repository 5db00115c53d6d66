"""The window stage's phrase evidence (ldr/search/phrases.py): its weight by 5-fold CV grouped by
relevant document, each weight's nDCG@10, and the index's default search reproduced.

    python bench/sweeps/phrase_sweep.py --index IDX --data ../shared/data/qmsum-train

Each query is searched twice (phrase_weight 0: the window stage's score before the phrases;
phrase_weight 1: the phrases' raw BM25 of every rescored candidate); each weight's mix is then
formed as the stage forms it. Queries under phrases.MIN_TERMS analysed terms get no phrase
evidence, as in the stage.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))   # bench/: the helpers the sweeps share
from qmsum_eval import cross_validate, judged, last_mix, last_mix_rows, ndcg10  # noqa: E402

WEIGHTS = (0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--index", required=True)
    ap.add_argument("--data", required=True, type=Path)
    ap.add_argument("--depth", type=int, default=50, help="the window stage's depth (the index's default: 50)")
    a = ap.parse_args()
    import ldr
    from scipy import stats

    idx = ldr.open(a.index)
    qrels, queries = judged(a.data)
    qids = sorted(queries)
    default = []
    rows = last_mix_rows(idx, queries, "phrase_weight", "windows.phrases", a.depth, each=lambda q: default.append(
        ndcg10([h.id for h in idx.search(queries[q], k=10, relevance=False, passages=0)], qrels[q])))
    run = lambda q, u: last_mix(rows[q], u)

    scores = {u: np.array([ndcg10(run(q, u), qrels[q]) for q in qids]) for u in WEIGHTS}
    for u in WEIGHTS:
        p = stats.ttest_rel(scores[u], scores[0.0]).pvalue if u else float("nan")
        print(f"phrase_weight {u:<5g} nDCG@10 {100 * scores[u].mean():.2f}  ({100 * (scores[u].mean() - scores[0.0].mean()):+.2f}, p {p:.2g})")
    groups = [next(iter(qrels[q])) for q in qids]
    held, picks = cross_validate(scores, groups)
    print(f"5-fold CV grouped by relevant document: {100 * held.mean():.2f} against {100 * scores[0.0].mean():.2f} "
          f"(p {stats.ttest_rel(held, scores[0.0]).pvalue:.2g}); picks {picks}")
    print(f"the index's default search: {100 * np.mean(default):.2f}")


if __name__ == "__main__":
    main()
