"""The relevance fitted on a user's labels (`ldr tune --relevance`, issue 78): its learning curve.

For each BEIR folder and its default index, the default search's top 20 hits of every judged query
are scored once (the shipped estimate, as `ldr tune --relevance` collects it). Then, for 10, 20,
40 and 80 labelled queries drawn at random (`--draws` seeds each), the recalibration is fitted on
those queries as `ldr tune --relevance` fits it (eval/relevance_fit.py: Platt on the shipped
estimate and its features, its min_score from 5-fold out-of-fold estimates at precision 0.8, 90% confidence) and
scored on every other query of the set: ECE, and the precision and recall of the hits at or above
the min_score it reported. Shipped: the estimate as it is, on the same held-out queries.

    python bench/bench_relevance_labels.py --set qmsum-train=IDX:../shared/data/qmsum-train \\
        --set manpages=IDX2:DATA2 [--sizes 10,20,40,80] [--draws 5] [--json out.json]
"""
from __future__ import annotations

import argparse
import glob
import json
import random
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import ldr  # noqa: E402
from ldr.eval import relevance_fit as rf  # noqa: E402
from ldr.eval.beir import load_qrels, load_queries  # noqa: E402
from ldr.search.stages.relevance import own_relevance  # noqa: E402


def held_out(rows: dict, train: set, fit: dict | None) -> dict:
    keep = np.array([q not in train for q in rows["q"]])
    p, y = rows["p"][keep], rows["y"][keep]
    if fit is not None:
        names = rows["names"]
        p = np.array([own_relevance(fit, x, dict(zip(names, f))) for x, f in zip(p, rows["x"][keep])])
    out = {"ece": rf.ece(p, y), "queries": len(set(rows["q"][keep].tolist()))}
    cut = (fit or {}).get("min_score")
    if cut:
        kept = p >= cut["threshold"]
        out.update(precision=float(y[kept].mean()) if kept.any() else None, recall=float(y[kept].sum() / max(y.sum(), 1)),
                   threshold=cut["threshold"], certified=cut["certified"])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--set", action="append", required=True, help="NAME=INDEX:DATA")
    ap.add_argument("--sizes", default="10,20,40,80")
    ap.add_argument("--draws", type=int, default=5)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    sizes = [int(x) for x in a.sizes.split(",")]
    report = {}
    for spec in a.set:
        name, rest = spec.split("=", 1)
        idx, data = rest.split(":", 1)
        split = Path(glob.glob(f"{data}/qrels/*.tsv")[0]).stem
        queries, qrels = load_queries(Path(data)), load_qrels(Path(data), split)
        qids = sorted(q for q in qrels if q in queries and any(int(r) > 0 for r in qrels[q].values()))
        with ldr.open(idx) as index:
            rows = rf.dominant(rf.collect(index, queries, qrels, qids))
        report[name] = {"queries": len(qids), "shipped": held_out(rows, set(), None), "sizes": {}}
        print(f"{name}: {len(qids)} queries; shipped ECE {report[name]['shipped']['ece']:.3f}", flush=True)
        for n in sizes:
            if n >= len(qids):
                continue
            got = []
            for seed in range(a.draws):
                train = set(random.Random(seed).sample(qids, n))
                keep = np.array([q in train for q in rows["q"]])
                fit = rf.fit({k: v if k == "names" else v[keep] for k, v in rows.items()}, seed=seed)
                got.append({"fit": held_out(rows, train, fit), "shipped": held_out(rows, train, None),
                            "cv_ece": fit["ece"]["cross_validated"]})
            cuts = [g["fit"] for g in got if "threshold" in g["fit"]]
            row = {"ece": float(np.mean([g["fit"]["ece"] for g in got])),
                   "ece_worst": float(np.max([g["fit"]["ece"] for g in got])),
                   "ece_shipped": float(np.mean([g["shipped"]["ece"] for g in got])),
                   "with_min_score": len(cuts), "certified": sum(bool(c["certified"]) for c in cuts), "draws": len(got),
                   "precision": float(np.mean([c["precision"] for c in cuts if c["precision"] is not None]))
                   if cuts else None,
                   "precision_worst": min((c["precision"] for c in cuts if c["precision"] is not None), default=None),
                   "recall": float(np.mean([c["recall"] for c in cuts])) if cuts else None,
                   "threshold": float(np.mean([c["threshold"] for c in cuts])) if cuts else None}
            report[name]["sizes"][n] = row
            prec = (f"precision {row['precision']:.3f} (worst {row['precision_worst']:.3f}), recall {row['recall']:.2f} "
                    f"at min_score ~{row['threshold']:.2f}" if cuts else "no min_score reported")
            print(f"  {n:>3} labelled: held-out ECE {row['ece']:.3f} (worst {row['ece_worst']:.3f}; shipped "
                  f"{row['ece_shipped']:.3f}); {row['with_min_score']}/{row['draws']} draws report a min_score "
                  f"({row['certified']} certified at 90%); {prec}",
                  flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
