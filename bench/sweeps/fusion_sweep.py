"""Choose fusion and rerank defaults from `ldr eval` outputs (per-stage TREC runs + rerank features).

    python bench/sweeps/fusion_sweep.py OUT_DIR [OUT_DIR ...]      # e.g. an eval of qmsum-train and of passkey

For every method (rrf, minmax, zscore) and weight triple on a grid, fuse the bm25/dense/sparse
runs and score them; likewise weight the passage rescorer's three features. Queries are split
in two halves by id: weights chosen on one half are reported on the other (held-out).
"""
from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

import numpy as np

from ldr.eval.metrics import evaluate_per_query
from ldr.eval.runs import read_run
from ldr.search.fusion import fuse


def load(out: Path):
    """{task: (qrels, {stage: run}, features)} from an `ldr eval` output folder."""
    metrics = json.loads((out / "metrics.json").read_text())
    tasks = {}
    for name in metrics["raw"]:
        stages = {st: read_run(out / "runs" / f"{name}.{st}.trec") for st in ("bm25", "dense", "sparse")
                  if (out / "runs" / f"{name}.{st}.trec").exists()}
        fpath = out / "runs" / f"{name}.rerank_features.json"
        feats = json.loads(fpath.read_text()) if fpath.exists() else {}
        tasks[name] = (stages, feats)
    return metrics, tasks


def main():
    from ldr.eval import benchmarks

    grid = [0.0, 0.25, 0.5, 1.0]
    combos = [w for w in itertools.product(grid, repeat=3) if any(w)]
    results = {}
    for out in map(Path, sys.argv[1:]):
        metrics, tasks = load(out)
        s = metrics["settings"]
        loaded = {t.name: t for t in benchmarks.load(metrics["bench"], s.get("tasks"), s.get("data") if s.get("data") not in ("synthetic", "hub") else None,
                                                     s.get("lengths"), s.get("haystack"), s.get("split", "test"), s.get("seed", 0))}
        for name, (stages, feats) in tasks.items():
            qrels = {q: loaded[name].qrels[q] for q in next(iter(stages.values()))}
            metric = "acc@1" if loaded[name].group else "ndcg@10"
            for method in ("rrf", "minmax", "zscore"):
                for w in combos:
                    weights = dict(zip(("bm25", "dense", "sparse"), w))
                    run = {q: fuse({st: r.get(q, {}) for st, r in stages.items()}, method, weights) for q in qrels}
                    pq_ = evaluate_per_query(qrels, run, (metric,))
                    results.setdefault(("fusion", method, w), {})[name] = {q: v[metric] for q, v in pq_.items()}
            for w in combos:
                run = {}
                for q, fd in feats.items():
                    docs = list(fd)
                    cols = {f: np.array([fd[d].get(f, 0.0) for d in docs]) for f in ("bm25", "dense", "sparse")}
                    z = {f: (v - v.mean()) / v.std() if v.std() > 0 else 0 * v for f, v in cols.items()}
                    total = sum(wi * z[f] for wi, f in zip(w, ("bm25", "dense", "sparse")))
                    run[q] = dict(zip(docs, map(float, total)))
                if run:
                    pq_ = evaluate_per_query({q: qrels[q] for q in run}, run, (metric,))
                    results.setdefault(("rerank", "zscore", w), {})[name] = {q: v[metric] for q, v in pq_.items()}
    # group passkey@L / needle@L into their task (mean over lengths), then average tasks
    def task_scores(per_task, half=None):
        groups = {}
        for name, per_q in per_task.items():
            qs = sorted(per_q)
            if half is not None:
                qs = qs[half::2]
            groups.setdefault(name.split("@")[0], []).append(np.mean([per_q[q] for q in qs]) * 100)
        return {g: float(np.mean(v)) for g, v in groups.items()}

    rows = []
    for key, per_task in results.items():
        full = task_scores(per_task)
        rows.append((key, full, task_scores(per_task, 0), task_scores(per_task, 1)))
    names = sorted(rows[0][1])
    print("| stage | method | weights bm25/dense/sparse | " + " | ".join(names) + " | mean |")
    print("|---|---|---|" + "---|" * (len(names) + 1))
    for kind in ("fusion", "rerank"):
        cand = [r for r in rows if r[0][0] == kind]
        for method in sorted({r[0][1] for r in cand}):
            best = max((r for r in cand if r[0][1] == method), key=lambda r: np.mean(list(r[1].values())))
            eq = next(r for r in cand if r[0][1] == method and r[0][2] == (1.0, 1.0, 1.0))
            for label, r in (("equal", eq), ("best", best)):
                print(f"| {kind} | {method} ({label}) | {'/'.join(map(str, r[0][2]))} | "
                      + " | ".join(f"{r[1][n]:.1f}" for n in names) + f" | {np.mean(list(r[1].values())):.1f} |")
        # held-out: choose on half 0, report on half 1, and vice versa
        for a, b in ((2, 3), (3, 2)):
            pick = max(cand, key=lambda r: np.mean(list(r[a].values())))
            print(f"| {kind} | held-out: chosen on half {a - 2} | {pick[0][1]} {'/'.join(map(str, pick[0][2]))} | "
                  + " | ".join(f"{pick[b][n]:.1f}" for n in names) + f" | {np.mean(list(pick[b].values())):.1f} |")


if __name__ == "__main__":
    main()
