"""Which legs, analyzer and weights, then how much cross-encoder: the whole default stack on
qmsum-train, chosen by 5-fold cross-validation so the reported gain is on held-out queries.

    python bench/sweeps/stack_sweep.py --runs EVAL/runs --bm25 stem=EVAL/runs nostem=BM25_EVAL/runs \
        [--colbert COLBERT.trec] [--index QMSUM_4LEG_INDEX --every 8 --depth 20 --windows 4]

Stage 1 (every query): min-max fusion of the run files `ldr eval` wrote (dense and sparse from
--runs, one BM25 run per analyzer from --bm25, the colbert leg's run) over a grid of weights.
Each fold picks the setting best on the other four folds; the held-out nDCG@10 of the picks
is compared with today's fused list (paired t-test). Stage 2 (every n-th query, --index): the
cross-encoder (ms-marco-minilm-l12) scores the top `depth` of the setting chosen on all
queries, on each document's best passages found by the index's passage finder (up to `windows`),
and its z-normalised score is mixed with the fused one (ldr.search.pipeline.mix): passages per
document, how their scores combine and the weight chosen per fold again."""
from __future__ import annotations

import sys
import argparse
import itertools
import time
from pathlib import Path

import numpy as np

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))   # bench/: the helpers the sweeps share
from qmsum_eval import (DATA, cross_validate, folds, load_run, ndcg10, paired_row, qrels as read_qrels,  # noqa: F401
                        queries as read_queries, rank)


def report(name: str, v: np.ndarray, base: np.ndarray) -> None:
    paired_row(name, v, base, 58)


def main() -> None:
    from ldr.eval.runs import read_run
    from ldr.search.fusion import fuse

    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", required=True, help="`ldr eval` runs/ of today's default index (dense, sparse, fused)")
    ap.add_argument("--bm25", nargs="+", required=True, metavar="NAME=RUNS", help="BM25 runs per analyzer")
    ap.add_argument("--colbert", default=None, help="TREC run of the colbert leg (every meeting scored)")
    ap.add_argument("--data", default=str(DATA))
    ap.add_argument("--index", default=None, help="a qmsum-train index for the cross-encoder's passages")
    ap.add_argument("--every", type=int, default=8)
    ap.add_argument("--depth", type=int, default=20)
    ap.add_argument("--windows", type=int, default=4)
    ap.add_argument("--grid", default="dense=0.15,0.25,0.35,0.5;sparse=0.1,0.25,0.4;colbert=0,0.25,0.5,0.75",
                    help="weights tried per leg (BM25 is 1), e.g. dense=0.25;sparse=0.25;colbert=0,0.5")
    a = ap.parse_args()
    qrels = read_qrels(Path(a.data))
    runs = Path(a.runs)
    today = load_run(runs, "fused")
    qids = [q for q in qrels if q in today]
    base = np.array([ndcg10(rank(today[q]), qrels[q]) for q in qids])
    legs = {"dense": load_run(runs, "dense"), "sparse": load_run(runs, "sparse")}
    bm25 = {n: load_run(Path(p), "bm25") for n, p in (x.split("=", 1) for x in a.bm25)}
    if a.colbert:
        legs["colbert"] = read_run(Path(a.colbert))
    grid = {leg: tuple(map(float, ws.split(","))) for leg, ws in (x.split("=") for x in a.grid.split(";"))}
    names = [n for n in grid if n in legs]
    scores, fused_runs = {}, {}
    t = time.perf_counter()
    for an, ws in itertools.product(bm25, itertools.product(*[grid[n] for n in names])):
        w = {"bm25": 1.0, **dict(zip(names, ws))}
        key = (an, tuple(sorted(w.items())))
        per, run = [], {}
        for q in qids:
            f = fuse({"bm25": bm25[an].get(q, {}), **{n: legs[n].get(q, {}) for n in names}}, "minmax", w)
            run[q] = f
            per.append(ndcg10(rank(f), qrels[q]))
        scores[key], fused_runs[key] = np.array(per), run
    print(f"{len(scores)} fusion settings over {len(qids)} queries in {time.perf_counter() - t:.0f} s\n")
    print(f"{'qmsum-train nDCG@10, paired t-test against today':<58}{'':>7}{'Δ':>7}")
    report("today's fused (stemmed BM25 1, dense 0.25, sparse 0.25)", base, base)
    for an in bm25:
        report(f"  {an} BM25 alone", np.array([ndcg10(rank(bm25[an][q]), qrels[q]) for q in qids]), base)
    best_all = max(scores, key=lambda s: scores[s].mean())
    report(f"best setting in-sample: {best_all[0]} {dict(best_all[1])}", scores[best_all], base)
    groups = [min(qrels[q]) for q in qids]
    cv, picks = cross_validate(scores, groups)
    report("5-fold CV (held-out folds)", cv, base)
    for p in picks:
        print(f"    fold pick: {p[0]} {dict(p[1])}")
    for an in bm25:
        sub = {s: v for s, v in scores.items() if s[0] == an and dict(s[1]).get("colbert", 0) == 0}
        if sub and "colbert" in names:
            report(f"  5-fold CV, {an} BM25, no colbert", cross_validate(sub, groups)[0], base)
    if not a.index:
        return
    stage2(a, qids[:: a.every], qrels, fused_runs[best_all], base[:: a.every], best_all)


AGGREGATES = {"max": lambda x: x.max(), "mean of best 2": lambda x: np.sort(x)[-2:].mean()}


def stage2(a, qids: list, qrels: dict, fused: dict, base: np.ndarray, setting) -> None:
    """The cross-encoder on the top `depth` of the chosen fusion (see the module docstring).
    Every (query, passage) pair is scored once, so the number of passages per document (the
    finder's best n ≤ --windows), how window scores combine and the mixing weight are compared
    offline on the same scores."""
    import ldr
    from ldr.rerank.cross_encoder import CrossEncoderReranker, CrossEncoderSettings
    from ldr.search.pipeline import mix

    text = {q["_id"]: q["text"] for q in read_queries(Path(a.data))}
    ix = ldr.open(a.index)
    view = ix._view
    retrievers = {n: ix.retriever(n, view) for n in ix.retriever_names}
    finder = ix._finder(view, ix.search_defaults(view).get("weights"), retrievers)
    ce = CrossEncoderReranker(CrossEncoderSettings(model="ms-marco-minilm-l12", max_windows=1))
    weights = (0.1, 0.15, 0.2, 0.3, 0.4)
    counts = sorted({n for n in (1, 2, 4, a.windows) if n <= a.windows})
    keys = [(n, g, w) for n in counts for g in AGGREGATES for w in weights]
    per = {k: [] for k in keys}
    first = []
    t = time.perf_counter()
    for i, q in enumerate(qids):
        top = rank(fused[q])[: a.depth]
        rows = [ix.docstore.row(d) for d in top]
        reps = {k: ix.query_side(k).encode(text[q]) for k in finder.vector_kinds}
        found = finder.find(text[q], reps, {r: ix.document(d).text for r, d in zip(rows, top)}, a.windows)
        pairs = [(j, p.text) for j, r in enumerate(rows) for p in found[r]]     # best passage first
        s = ce.score(text[q], [x for _, x in pairs], [[x] for _, x in pairs], 1)
        by_doc = [np.array([s[k] for k, (j, _) in enumerate(pairs) if j == jj]) for jj in range(len(top))]
        f = np.array([fused[q][d] for d in top])
        first.append(ndcg10(top, qrels[q]))
        for n, g, w in keys:
            doc = np.array([AGGREGATES[g](x[:n]) if len(x) else -1e9 for x in by_doc])
            m = mix(doc, f, w)
            per[(n, g, w)].append(ndcg10([top[j] for j in np.argsort(-m, kind="stable")], qrels[q]))
        if (i + 1) % 20 == 0:
            print(f"  {i + 1}/{len(qids)} queries, {(time.perf_counter() - t) / (i + 1):.1f} s/query", flush=True)
    print(f"\ncross-encoder on the top {a.depth} (up to {a.windows} passages each) of {setting[0]} "
          f"{dict(setting[1])}, {len(qids)} queries, {(time.perf_counter() - t) / len(qids):.1f} s/query")
    report("today's fused (these queries)", base, base)
    report("chosen fusion (in-sample on all queries)", np.array(first), base)
    scores = {k: np.array(v) for k, v in per.items()}
    for k in keys:
        report(f"  + cross-encoder, {k[0]} passages, {k[1]}, w={k[2]}", scores[k], base)
    cv, picks = cross_validate(scores, [min(qrels[q]) for q in qids])
    report("  + cross-encoder, passages/combination/weight by 5-fold CV", cv, base)
    for p in picks:
        print(f"    fold pick: {p}")


if __name__ == "__main__":
    main()
