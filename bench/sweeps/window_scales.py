"""The window stage's evidence windows: the vector kinds' passages (the default before) against
windows of a fixed number of analysed terms at one or two scales, chosen by 5-fold CV on one
dataset (folds grouped by relevant document) and checked as they are on others.

    python bench/sweeps/window_scales.py --index QMSUM_INDEX --data ../shared/data/qmsum-train
    python bench/sweeps/window_scales.py --index LEGAL_INDEX --data ../shared/data/legal-case-reports-dev \\
        --check 0.5:120:0.6,40:0.4

--index: a default index of the dataset (`ldr index DATA/corpus.jsonl -o IDX`, or `ldr eval`'s
cache). Each query is searched once at window weight 1 with every scale asked, so each of the top
`--depth` candidates carries its fused score, its best passage's BM25 (`windows.best`, today's
evidence) and its best window's BM25 at every size (`windows.tS`) as the pipeline computes them;
the mixes are formed here exactly as ldr/search/stages/windows.py forms them. Without --check,
every setting of the grid is scored and the 5-fold CV pick is compared with today's setting
(paired t); with --check WEIGHT:SCALES, that one setting against today's; with --latency N, the
warm p50 of today's setting against the index's default on N of the queries."""
from __future__ import annotations

import sys
import argparse
import itertools
import time
from pathlib import Path

import numpy as np

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))   # bench/: the helpers the sweeps share
from qmsum_eval import judged, ndcg10, paired_row, rank  # noqa: E402
from stack_sweep import cross_validate  # noqa: E402

from ldr.search.normalise import minmax
from ldr.search.window_scales import parse

SIZES = (40, 80, 120, 200)
TODAY = (0.4, "passages")


def candidates(index, text: str, depth: int) -> tuple[list, dict]:
    """(ids of the top `depth`, {score key: array}) with every scale's raw evidence."""
    asked = ",".join(f"{s}:1" for s in SIZES)
    hits = index.search(text, k=depth, window_weight=1.0, window_depth=depth, window_scales=asked,
                        rerank=False, relevance=False, passages=0)
    keys = ["fused", "windows.best"] + [f"windows.t{s}" for s in SIZES]
    return [h.id for h in hits], {k: np.array([h.scores.get(k, 0.0) for h in hits]) for k in keys}


def ranking(ids: list, cols: dict, weight: float, scales: str) -> list:
    """The pipeline's order at this weight and these scales (equal scores by id)."""
    pairs = parse(scales)
    if not pairs:
        evidence = minmax(cols["windows.best"])
    else:
        evidence = sum(w * minmax(cols[f"windows.t{s}"]) for s, w in pairs) / sum(w for _, w in pairs)
    mixed = (1 - weight) * minmax(cols["fused"]) + weight * evidence
    return rank(dict(zip(ids, mixed)))


def grid() -> list[tuple[float, str]]:
    out = [(w, "passages") for w in (0.3, 0.4, 0.5)]
    for a, c in itertools.product((0, .1, .2, .3, .4, .5), repeat=2):
        for s1, s2 in itertools.combinations(SIZES[::-1], 2):
            if 0 < a + c <= 0.9 and a > 0:
                scales = f"{s1}:{a / (a + c):.3g}" + (f",{s2}:{c / (a + c):.3g}" if c else "")
                out.append((round(a + c, 2), scales))
    return sorted(set(out))


def main() -> None:
    import ldr

    ap = argparse.ArgumentParser()
    ap.add_argument("--index", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--depth", type=int, default=50)
    ap.add_argument("--check", default=None, help="WEIGHT:SCALES, e.g. 0.5:120:0.6,40:0.4")
    ap.add_argument("--latency", type=int, default=0, metavar="N",
                    help="only time N queries: today's setting against the index's default, alternating, warm")
    a = ap.parse_args()
    qrels, qs = judged(Path(a.data))
    qids = sorted(qs)
    index = ldr.open(a.index)
    if a.latency:
        return latency(index, [qs[q] for q in qids[::max(1, len(qids) // a.latency)][:a.latency]])
    t = time.time()
    cands = {q: candidates(index, qs[q], a.depth) for q in qids}
    print(f"{len(qids)} queries searched in {time.time() - t:.0f} s", flush=True)

    def scores(setting):
        return np.array([ndcg10(ranking(*cands[q], *setting), qrels[q]) for q in qids])

    today = scores(TODAY)
    paired_row(f"today (weight {TODAY[0]}, {TODAY[1]})", today, today, 50)
    if a.check:
        w, _, scales = a.check.partition(":")
        paired_row(f"weight {w}, {scales}", scores((float(w), scales)), today, 50)
        return
    table = {s: scores(s) for s in grid()}
    best = max(table, key=lambda s: table[s].mean())
    paired_row(f"best on all: weight {best[0]}, {best[1]}", table[best], today, 50)
    groups = [min(qrels[q]) for q in qids]
    held, picks = cross_validate(table, groups)
    paired_row("5-fold CV (grouped by relevant document)", held, today, 50)
    print("picks per fold:", "; ".join(f"weight {w}, {s}" for w, s in picks))


def latency(index, texts: list[str]) -> None:
    """Warm p50 of a default search with today's windows against the index's default, in one run:
    each query searched by both, in alternating order (a busy hour slows both alike)."""
    today = {"window_weight": TODAY[0], "window_scales": TODAY[1]}
    for t in texts[:10]:
        index.search(t, **today), index.search(t)
    took: dict = {"today": [], "default": []}
    stage: dict = {"today": [], "default": []}
    for i, t in enumerate(texts):
        order = [("today", today), ("default", {})]
        for name, opts in order if i % 2 else order[::-1]:
            t0 = time.perf_counter()
            r = index.search(t, **opts)
            took[name].append(time.perf_counter() - t0)
            stage[name].append(r.timings_ms.get("windows", 0.0))
    a, b = (1000 * np.median(took[k]) for k in ("today", "default"))
    print(f"{len(texts)} queries, warm p50: today {a:.1f} ms, default {b:.1f} ms ({b / a:.2f}x); "
          f"window stage {np.median(stage['today']):.1f} vs {np.median(stage['default']):.1f} ms")


if __name__ == "__main__":
    main()
