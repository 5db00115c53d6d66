"""Do the default search's own scores, or the query's terms weighed among its top candidates alone,
tell a document from its close neighbours (issue 77)? Two rerankings of each query's top 10,
scored on qmsum-train's queries:

- local idf: BM25 of the query's terms over each candidate's whole text with idf counted among the
  top K candidates only (a term every sibling holds weighs nothing), min-max mixed at weight w
  into the default's own order;
- a learned mix: a pairwise logistic model over the stage scores each hit carries (bm25, dense,
  sparse, fused, the window evidence, the relevance's features and the final score, min-max within
  the query), 5-fold cross-validated grouped by relevant meeting.

    python bench/sweeps/close_candidates.py --index IDX --data ../shared/data/qmsum-train
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))   # bench/: the helpers the sweeps share
from qmsum_eval import folds, judged, minmax, ndcg10  # noqa: E402

FEATURES = ("bm25", "dense", "sparse", "fused", "windows.best", "windows.t200", "windows.t40", "windows.phrases",
            "windows.aspects", "relevance.cover", "relevance.bm25.z", "relevance.bm25.best")


def local_bm25(qterms: Counter, cands: list[str], tf: dict, length: dict, k1: float = 1.2, b: float = 0.75):
    avg = float(np.mean([length[d] for d in cands]))
    df = {t: sum(1 for c in cands if tf[c].get(t)) for t in qterms}
    out = []
    for d in cands:
        s = 0.0
        for t, n in qterms.items():
            f = tf[d].get(t, 0)
            if f:
                idf = math.log(1 + (len(cands) - df[t] + 0.5) / (df[t] + 0.5))
                s += n * idf * f * (k1 + 1) / (f + k1 * (1 - b + b * length[d] / avg))
        out.append(s)
    return np.array(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--index", required=True)
    ap.add_argument("--data", required=True, type=Path)
    a = ap.parse_args()
    import ldr
    from scipy import stats
    from sklearn.linear_model import LogisticRegression

    qrels, queries = judged(a.data)
    qids = sorted(queries)
    idx = ldr.open(a.index)
    runs = {q: [(h.id, h.score, dict(h.scores)) for h in idx.search(queries[q], k=10, passages=0)] for q in qids}
    base = np.array([ndcg10([h[0] for h in runs[q]], qrels[q]) for q in qids])
    print(f"default: nDCG@10 {100 * base.mean():.2f}, top hit wrong {sum(runs[q][0][0] not in qrels[q] for q in qids)}")

    an = idx.retriever("bm25")._an
    texts = {json.loads(x)["_id"]: json.loads(x)["text"] for x in open(a.data / "corpus.jsonl", encoding="utf-8")}
    tf = {d: Counter(an.analyze(t)) for d, t in texts.items()}
    length = {d: sum(c.values()) for d, c in tf.items()}
    for k in (3, 5, 10):
        local = {q: local_bm25(Counter(an.analyze(queries[q])), [h[0] for h in runs[q][:k]], tf, length) for q in qids}
        for w in (0.05, 0.1, 0.2, 0.5):
            got = []
            for q in qids:
                top = runs[q][:k]
                s = minmax(np.array([h[1] for h in top])) + w * minmax(local[q])
                got.append(ndcg10([top[i][0] for i in np.argsort(-s, kind="stable")] + [h[0] for h in runs[q][k:]],
                                  qrels[q]))
            got = np.array(got)
            print(f"local idf, top {k:>2}, w {w:<4}: {100 * got.mean():.2f} ({100 * (got - base).mean():+.2f}, "
                  f"p {stats.ttest_rel(got, base).pvalue:.2g})")

    def feats(q):
        x = np.nan_to_num(np.array([[h[2].get(f, 0.0) for f in FEATURES] + [h[1]] for h in runs[q]], dtype=float))
        return np.column_stack([minmax(c) for c in x.T]), np.array([h[0] in qrels[q] for h in runs[q]])

    data = {q: feats(q) for q in qids}
    learned = base.copy()
    for test in folds([next(iter(qrels[q])) for q in qids], 5):
        held = set(test.tolist())
        pairs, labels = [], []
        for i, q in enumerate(qids):
            x, y = data[q]
            if i in held:
                continue
            for p in np.flatnonzero(y):
                for n in np.flatnonzero(~y):
                    pairs += [x[p] - x[n], x[n] - x[p]]
                    labels += [1, 0]
        model = LogisticRegression(fit_intercept=False, max_iter=1000).fit(np.array(pairs), np.array(labels))
        for i in held:
            x, _ = data[qids[i]]
            order = np.argsort(-(x @ model.coef_[0]), kind="stable")
            learned[i] = ndcg10([runs[qids[i]][j][0] for j in order], qrels[qids[i]])
    print(f"learned mix of the stage's scores, 5-fold CV grouped by meeting: {100 * learned.mean():.2f} "
          f"({100 * (learned - base).mean():+.2f}, p {stats.ttest_rel(learned, base).pvalue:.2g})")


if __name__ == "__main__":
    main()
