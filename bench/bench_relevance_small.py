"""The shipped relevance from one document up (issue 78): how it fares on random sub-corpora.

For each BEIR folder and its default index, random sub-corpora of `--sizes` documents (`--seeds`
draws each) are made as a user would have them: a copy of the index with every other document
deleted (the same vectors, BM25's statistics over the documents left). Each is asked its queries
(those with a relevant document in it), the default search's top 20 hits scored with the shipped
relevance as a user gets it. Reported per dataset and size: the queries, top-1 accuracy against the
mean top-1 relevance (their gap), ECE over every returned hit, and the precision of the hits at
0.5. `--unanswered`: the queries none of whose relevant documents is in the sub-corpus instead (every
hit irrelevant: what the relevance says when the corpus cannot answer).

    python bench/bench_relevance_small.py --set qmsum-train=IDX:../shared/data/qmsum-train \\
        [--set ...] [--sizes 1,3,10,25,40] [--seeds 5] [--json out.json]
"""
from __future__ import annotations

import argparse
import glob
import json
import random
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Iterator

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import ldr  # noqa: E402
from ldr.eval.beir import load_qrels, load_queries  # noqa: E402
from ldr.eval.relevance_fit import ece  # noqa: E402


def judged(data: Path) -> tuple[dict, dict]:
    split = Path(glob.glob(f"{data}/qrels/*.tsv")[0]).stem
    return load_queries(data), load_qrels(data, split)


def sub_corpora(index: str, queries: dict, qrels: dict, sizes: list[int], seeds: int,
                unanswered: bool = False) -> Iterator[tuple[int, int, ldr.Index, list[str]]]:
    """(size, seed, the sub-corpus opened, its queries) for each draw; the copy is removed after."""
    with ldr.open(index) as full:
        every = sorted(full.live_ids())
    for size in sizes:
        for seed in range(seeds):
            keep = set(random.Random(f"{seed}-{size}").sample(every, min(size, len(every))))
            answered = [q for q, r in qrels.items() if q in queries and any(d in keep and g > 0 for d, g in r.items())]
            qids = answered
            if unanswered:
                others = [q for q, r in qrels.items() if q in queries and not any(d in keep for d in r)]
                qids = random.Random(seed).sample(others, min(len(answered), len(others)))
            with tempfile.TemporaryDirectory(prefix="ldr-sub-") as tmp:
                work = Path(tmp) / "index"
                shutil.copytree(index, work)
                sub = ldr.open(work)
                if len(keep) < len(every):
                    sub.delete([d for d in every if d not in keep], wait=True)
                try:
                    yield size, seed, sub, qids
                finally:
                    sub.close()


def scored(sub: ldr.Index, queries: dict, qrels: dict, qids: list[str], k: int = 20) -> list[tuple[int, float, int]]:
    """(rank, relevance, relevant?) of each returned hit."""
    out = []
    for q in qids:
        for rank, h in enumerate(sub.search(queries[q], k=k)):
            out.append((rank, float(h.relevance), int(qrels[q].get(h.id, 0) > 0)))
    return out


def summary(rows: list[tuple[int, float, int]], queries: int) -> dict:
    if not rows:
        return {"queries": queries}
    rank, p, y = (np.array(c) for c in zip(*rows))
    top = rank == 0
    kept = p >= 0.5
    return {"queries": queries, "top1_accuracy": round(float(y[top].mean()), 4),
            "mean_top1_relevance": round(float(p[top].mean()), 4),
            "gap": round(float(p[top].mean() - y[top].mean()), 4), "ece": round(ece(p, y), 4),
            "precision_at_0.5": round(float(y[kept].mean()), 4) if kept.any() else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--set", action="append", required=True, help="NAME=INDEX:DATA")
    ap.add_argument("--sizes", default="1,3,10,25,40")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--unanswered", action="store_true")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    sizes = [int(x) for x in a.sizes.split(",")]
    report: dict = {}
    print("| set | documents | queries | top-1 right | mean top-1 relevance | gap | ECE | precision at 0.5 |")
    print("|---|---|---|---|---|---|---|---|")
    for spec in a.set:
        name, rest = spec.split("=", 1)
        idx, data = rest.split(":", 1)
        queries, qrels = judged(Path(data))
        rows: dict[int, list] = {}
        asked: dict[int, int] = {}
        for size, _seed, sub, qids in sub_corpora(idx, queries, qrels, sizes, a.seeds, a.unanswered):
            rows.setdefault(size, []).extend(scored(sub, queries, qrels, qids))
            asked[size] = asked.get(size, 0) + len(qids)
        for size in sizes:
            r = report.setdefault(name, {})[size] = summary(rows.get(size, []), asked.get(size, 0))
            cells = [r.get(c) for c in ("top1_accuracy", "mean_top1_relevance", "gap", "ece", "precision_at_0.5")]
            print(f"| {name} | {size} | {r['queries']} | " + " | ".join("-" if c is None else f"{c:.3f}" for c in cells) + " |",
                  flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
