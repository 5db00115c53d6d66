"""The window stage's depth and weight, chosen by 5-fold cross-validation on qmsum-train (folds
grouped by meeting), and what the choice does to passkey and needle.

    python bench/sweeps/window_sweep.py --index QMSUM_INDEX [--longembed LONGEMBED_EVAL_CACHE]

--index: an index of qmsum-train built with today's defaults (the one `ldr eval --bench beir`
caches under its out/cache). Each query is searched once per depth with window_weight=1, so
every candidate of the depth carries its fused score and its best window's BM25 (among the
candidates' windows, as the pipeline computes it); the mix (1 - w)·minmax(fused) + w·minmax(window)
is then formed here for every weight, exactly as ldr.search.pipeline.window_stage forms it.
Each fold picks the (depth, weight) best on the other four; the held-out nDCG@10 is compared
with the fused list (paired t-test). --longembed: a folder of `ldr eval --bench longembed`
cached indexes; Acc@1 of the fused list and of the stage per length at several settings."""
from __future__ import annotations

import sys
import argparse
import re
from pathlib import Path

import numpy as np

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))   # bench/: the helpers the sweeps share
from qmsum_eval import DATA, ndcg10, paired_row, qrels as read_qrels, queries as read_queries, rank  # noqa: E402
from stack_sweep import cross_validate  # noqa: E402

from ldr.search.normalise import minmax

DEPTHS = (10, 20, 30, 50)
WEIGHTS = (0.0, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)


def candidates(index, text: str, depth: int) -> list[tuple[str, float, float]]:
    """(id, fused score, best-window BM25) of the fused top `depth`, then the rest (window None)."""
    hits = index.search(text, k=max(depth, 10), window_weight=1.0, window_depth=depth, rerank=False)
    return [(h.id, h.scores.get("fused", 0.0), h.scores.get("windows.best")) for h in hits]


def ranking(cands, depth: int, w: float) -> list[str]:
    """The pipeline's order at weight `w` (0: the fused order; equal scores by id)."""
    head, tail = cands[:depth], cands[depth:]
    f = minmax(np.array([c[1] for c in head])); g = minmax(np.array([c[2] for c in head]))
    mixed = {c[0]: (1 - w) * a + w * b for c, a, b in zip(head, f, g)}
    return rank(mixed) + [c[0] for c in sorted(tail, key=lambda c: (-c[1], c[0]))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--index", default=None, help="a qmsum-train index (leave out: the synthetic tasks only)")
    ap.add_argument("--data", default=str(DATA))
    ap.add_argument("--longembed", default=None, help="ldr eval --bench longembed's cache folder")
    a = ap.parse_args()
    if a.index:
        qmsum(a)
    if a.longembed:
        longembed(Path(a.longembed))


def qmsum(a) -> None:
    import ldr

    qrels = read_qrels(Path(a.data))
    qs = {q["_id"]: q["text"] for q in read_queries(Path(a.data)) if q["_id"] in qrels}
    qids = sorted(qs)
    groups = [next(iter(qrels[q])) for q in qids]
    index = ldr.open(a.index)
    scores = {}
    for depth in DEPTHS:
        cands = {q: candidates(index, qs[q], depth) for q in qids}
        for w in WEIGHTS:
            scores[(depth, w)] = np.array([ndcg10(ranking(cands[q], depth, w), qrels[q]) for q in qids])
        print(f"depth {depth}: searched", flush=True)
    base = scores[(DEPTHS[0], 0.0)]
    print(f"\nqmsum-train, {len(qids)} queries; nDCG@10 against the fused list (paired t)")
    for key, v in scores.items():
        if key[1] > 0:
            paired_row(f"depth {key[0]}, weight {key[1]}", v, base, 40)
    held, picks = cross_validate({k: v for k, v in scores.items() if k[1] > 0}, groups)
    paired_row("5-fold CV (grouped by meeting)", held, base, 40)
    print("picks per fold:", ", ".join(f"depth {d} w {w}" for d, w in picks))


def longembed(folder: Path) -> None:
    import ldr

    settings = [(20, 0.5), (30, 0.4), (50, 0.4), (50, 0.5)]
    print("\nAcc@1 (50 queries per length): fused, then the window stage per (depth, weight)")
    print("| task | fused | " + " | ".join(f"{d}, {w}" for d, w in settings) + " |")
    print("|---|---|" + "---|" * len(settings))
    key = lambda p: (p.name.split("@")[0], int(re.findall(r"@(\d+)", p.name)[0]))
    for path in sorted(folder.iterdir(), key=key):
        task, length = key(path)
        idx, queries = ldr.open(path), _synthetic_queries(task, length)
        hits = {s: 0 for s in [(0, 0.0)] + settings}
        for text, rel in queries.values():
            per_depth = {d: candidates(idx, text, d) for d in {d for d, _ in settings}}
            hits[(0, 0.0)] += ranking(per_depth[20], 20, 0.0)[0] == rel
            for d, w in settings:
                hits[(d, w)] += ranking(per_depth[d], d, w)[0] == rel
        n = len(queries)
        print(f"| {task}@{length} | " + " | ".join(f"{100 * v / n:.0f}" for v in hits.values()) + " |", flush=True)




def _synthetic_queries(task: str, length: int) -> dict:
    from ldr.eval import synthetic
    hay = DATA.parent / "paul-graham-essays"
    t = synthetic.needle(hay, lengths=[length]) if task == "needle" else synthetic.passkey(lengths=[length])
    rel = {r["qid"]: r["doc_id"] for r in t.qrels}
    return {q["qid"]: (q["text"], rel[q["qid"]]) for q in t.queries}


if __name__ == "__main__":
    main()
