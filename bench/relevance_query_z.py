"""An experiment for issue 59's next step: relevance features from the query's own score
distribution over the index (the index's statistics, not the other candidates).

For each query, every document's BM25 and dense score (a search of each kind alone with k = all
documents) give the query's mean and standard deviation per kind; a hit's feature is its score as
a z-score in that distribution. With the share of the query's terms two neighbouring windows hold
(`cover`), a logistic regression is fitted on the other datasets (each weighted equally) and
scored on the held-out one, as bench/fit_calibration.py does for the shipped estimate.

    python bench/relevance_query_z.py --set NAME=DATA:INDEX ... [--max-queries N] [--out JSON]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import fit_calibration as fc  # noqa: E402

FEATURES = {"z+cover+ratio": ("ratio", "cover", "bm25_z", "dense_z"), "z+cover": ("bm25_z", "dense_z", "cover"),
            "z": ("bm25_z", "dense_z")}


def collect(name: str, data: Path, index_path: str, max_queries: int | None) -> dict:
    import ldr
    from ldr.eval.beir import load_qrels, load_queries
    from ldr.search import calibration

    ix = ldr.open(index_path)
    qs, qrels = load_queries(data), load_qrels(data, "test")
    qs = {q: t for q, t in sorted(qs.items()) if q in qrels}
    if max_queries:
        qs = dict(list(qs.items())[:max_queries])
    stats: dict = {}
    for kind in ("bm25", "dense"):
        for qid, hits in ix.search_many(qs, k=len(ix), passages=0, mode=kind, rerank=False):
            v = np.array([h.scores.get(kind, 0.0) for h in hits] + [0.0] * (len(ix) - len(hits)))
            stats.setdefault(qid, {})[kind] = (float(v.mean()), float(v.std() or 1.0))
    saved = calibration.table
    calibration.table = lambda: fc._collecting(ix.manifest["components"])     # noqa: E731
    rows = []
    try:
        for qid, hits in ix.search_many(qs, k=20, passages=0):
            rel = {d for d, r in qrels[qid].items() if r > 0}
            for h in hits:
                x = {"ratio": h.scores.get("relevance.bm25", 0.0), "cover": h.scores.get("relevance.cover", 0.0)}
                for kind in ("bm25", "dense"):
                    m, s = stats[qid][kind]
                    x[kind + "_z"] = (h.scores.get(kind, 0.0) - m) / s
                rows.append((qid, h.rank, x, int(h.id in rel)))
    finally:
        calibration.table = saved
    print(f"{name}: {len(qs)} queries, {len(rows)} hits", file=sys.stderr)
    return {"name": name, "rows": rows, "queries": len(qs)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--set", action="append", required=True, metavar="NAME=DATA:INDEX")
    ap.add_argument("--max-queries", type=int, default=400)
    ap.add_argument("--out", default="bench/figures/relevance_query_z.json")
    a = ap.parse_args()
    sets = []
    for spec in a.set:
        name, where = spec.split("=", 1)
        data, index = where.rsplit(":", 1)
        sets.append(collect(name, Path(data), index, a.max_queries))
    result = {}
    for label, names in FEATURES.items():
        for ds in sets:
            others = [o for o in sets if o is not ds]
            mats = [(np.array([[r[2][f] for f in names] for r in o["rows"]]), np.array([r[3] for r in o["rows"]], float))
                    for o in others]
            X = np.vstack([m for m, _ in mats])
            y = np.concatenate([v for _, v in mats])
            sw = np.concatenate([np.full(len(v), 1.0 / o["queries"]) for (_, v), o in zip(mats, others)])
            w = fc.fit_logistic(X, y, sw * len(others) * 100)
            p = fc.predict(w, np.array([[r[2][f] for f in names] for r in ds["rows"]]))
            result.setdefault(label, {})[ds["name"]] = fc.scores(ds, p)
        fc._table(f"features {label}, each dataset held out of its fit:", result[label])
    Path(a.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
