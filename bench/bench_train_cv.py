"""Cross-validated domain adaptation on qmsum-train: `ldr tune`, `ldr train dense`, `ldr train reranker`.

The queries are split in K folds (seeded). For each fold, everything is chosen or trained on the
other folds' queries only (the dev splits for early stopping are carved from those), and scored
on the fold's queries (nDCG@10):
- defaults: the base index as built (minmax fusion 1/¼/¼, no rerank);
- tuned: `ldr tune`'s fusion choice on the training queries, on the base index;
- dense: the dense stage alone, base model vs the model `ldr train dense` made;
- adapted index: the corpus indexed again with the trained dense model (BM25 and SPLADE as
  before), its fusion tuned on the training queries (`ldr tune`, committed);
- reranked: that index's fused top `--rerank-depth` reranked by the cross-encoder `ldr train
  reranker` made, its score alone;
- final pipeline: the adapted index with the reranking `ldr tune --rerank-only` chose on a sample
  of the training queries (depth, and the reranker's share of the score mixed with the fused
  score; or no reranking), through the real search pipeline.
Every query is mined once (a query's examples depend only on its own judgements and the base
index); each fold trains on its own queries' examples. Mean and spread over the folds run are
printed and written as JSON.

    python bench/bench_train_cv.py --index IDX [--folds 5] [--only 0,1] [--work DIR]
"""
from __future__ import annotations

import argparse
import json
import pickle
import random
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
NAMES = ["bm25", "dense", "sparse"]


def mean_ndcg(qrels, run, qids) -> float:
    from ldr.eval.metrics import evaluate_per_query
    per = evaluate_per_query({q: qrels[q] for q in qids}, {q: run.get(q, {}) for q in qids}, ("ndcg@10",))
    return 100 * float(np.mean([per[q]["ndcg@10"] for q in qids]))


def as_run(ids: list[str]) -> dict[str, float]:
    return {d: float(len(ids) - r) for r, d in enumerate(ids)}


def retriever_runs(index, queries, qids, names) -> dict:
    depth = min(1000, len(index))
    return {n: {qid: ({} if isinstance(r, Exception) else {h.id: h.score for h in r})
                for qid, r in index.search_many({q: queries[q] for q in qids}, k=depth, mode=n, rerank=False)}
            for n in names}


def fused(runs: dict, qids, setting: dict) -> dict:
    from ldr.eval.tune import fuse_runs
    return fuse_runs({n: runs[n] for n in NAMES}, setting, qids)


LABELS = {"defaults": "defaults", "tuned": "ldr tune (base index)", "dense_base": "dense stage, packaged",
          "dense_trained": "dense stage, ldr train dense", "adapted_fused": "adapted index, tuned fusion",
          "reranked": "trained cross-encoder alone (top 20)", "final": "final pipeline"}


def plot(folds: dict, png: Path) -> None:
    """Per-fold held-out nDCG@10 of each row, with the mean."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = [k for k in LABELS if any(k in r for r in folds.values())]
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(keys) + 1.2))
    for y, k in enumerate(keys):
        vals = [r[k] for r in folds.values() if k in r]
        ax.scatter(vals, [y] * len(vals), color="#4c72b0", s=18, zorder=3)
        ax.scatter([np.mean(vals)], [y], color="#c44e52", marker="|", s=300, zorder=4)
    ax.set_yticks(range(len(keys)), [f"{LABELS[k]} ({sum(k in r for r in folds.values())})" for k in keys])
    ax.invert_yaxis()
    ax.set_xlabel("nDCG@10 on the fold's held-out queries (dots: folds, bar: mean)")
    ax.grid(axis="x", alpha=0.3)
    ax.set_title("qmsum-train, 5-fold CV: ldr tune / ldr train")
    fig.tight_layout()
    fig.savefig(png, dpi=120)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=str(ROOT.parent / "shared/data/qmsum-train"))
    ap.add_argument("--split", default="test")
    ap.add_argument("--index", required=True, help="a default `ldr index` of DATA/corpus.jsonl")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--only", default=None, help="run only these folds, e.g. 0,1")
    ap.add_argument("--work", default="/tmp/ldr-cv")
    ap.add_argument("--parts", default="dense,reranker", help="dense: up to the adapted index; reranker: also train "
                    "and tune the cross-encoder (the final pipeline)")
    ap.add_argument("--rerank-depth", type=int, default=20)
    ap.add_argument("--rerank-windows", type=int, default=2,
                    help="windows per document the cross-encoder scores (the first stage's best passages)")
    ap.add_argument("--rerank-tune-queries", type=int, default=150)
    ap.add_argument("--dense-epochs", type=float, default=1.0)
    ap.add_argument("--dense-loss", default="mnrl")
    ap.add_argument("--reranker-epochs", type=float, default=1.0)
    ap.add_argument("--reranker-lr", type=float, default=5e-5)
    ap.add_argument("--reranker-loss", default="mnrl")
    ap.add_argument("--reranker-negatives", type=int, default=3)
    ap.add_argument("--reranker-max-length", type=int, default=384)
    ap.add_argument("--reranker-steps", type=int, default=40, help="training steps (batch 16; -1: the epochs)")
    ap.add_argument("--json", default=str(ROOT / "bench/results/train_cv.json"))
    ap.add_argument("--png", default=str(ROOT / "bench/figures/train_cv.png"))
    ap.add_argument("--report", action="store_true", help="only print and plot the folds already in --json")
    args = ap.parse_args()
    if args.report:
        return report(json.loads(Path(args.json).read_text()), args)

    import ldr
    from ldr.encode.dense import DenseSettings
    from ldr.eval.beir import load_qrels, load_queries
    from ldr.eval.tune import TuneOptions, _reweighted, as_search_defaults, describe, tune
    from ldr.train.dense import DenseTrainSettings
    from ldr.train.mining import mine
    from ldr.train.reranker import RerankerTrainSettings
    from ldr.train.run import train

    data, work = Path(args.data), Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    queries, qrels = load_queries(data), load_qrels(data, args.split)
    qids = sorted(q for q in qrels if q in queries)
    shuffled = qids[:]
    random.Random(0).shuffle(shuffled)
    folds = [sorted(shuffled[i::args.folds]) for i in range(args.folds)]
    index = ldr.Index(args.index)
    cache = work / "base-runs.pkl"
    if cache.is_file():
        base_runs, mined = pickle.loads(cache.read_bytes())
    else:
        t = time.perf_counter()
        print("base runs of every retriever, and every query's training examples ...", flush=True)
        base_runs = retriever_runs(index, queries, qids, NAMES)
        examples, _ = mine(index, queries, qrels, qids, negatives=4, progress=True)
        mined = {ex.qid: ex for ex in examples}
        cache.write_bytes(pickle.dumps((base_runs, mined)))
        print(f"  {time.perf_counter() - t:.0f} s; {len(mined)} queries mined", flush=True)
    default = index.search_defaults()
    default_setting = {"fusion": default["fusion"], "weights": default["weights"], "rrf_k": default["rrf_k"]}
    out = json.loads(Path(args.json).read_text()) if Path(args.json).is_file() else {}
    out.setdefault("folds", {})

    def save(f, row):
        out["folds"][str(f)] = row
        out["settings"] = vars(args)
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(out, indent=1, default=float))

    for f in [int(x) for x in args.only.split(",")] if args.only else range(args.folds):
        test = folds[f]
        train_q = sorted(set(qids) - set(test))
        row = {"test_queries": len(test), "train_queries": len(train_q)}
        row["defaults"] = mean_ndcg(qrels, fused(base_runs, test, default_setting), test)
        row["dense_base"] = mean_ndcg(qrels, base_runs["dense"], test)
        t = time.perf_counter()
        rep = tune(index, queries, {q: qrels[q] for q in train_q}, TuneOptions(rerank_depths=(), progress=False),
                   runs=base_runs)
        row["tuned_setting"] = describe(rep["chosen"])
        row["tuned"] = mean_ndcg(qrels, fused(base_runs, test, rep["chosen"]), test)
        row["tune_s"] = round(time.perf_counter() - t, 1)
        print(f"fold {f}: defaults {row['defaults']:.2f}, tuned {row['tuned']:.2f} ({row['tuned_setting']})",
              flush=True)

        # the dense encoder, and the index built with it
        model = work / f"dense-{f}"
        if not (model / "ldr-train.json").is_file():
            train("dense", data, model, split=args.split, indexes=ldr.Index, index_path=args.index, qids=train_q, mined=mined,
                  settings=DenseTrainSettings(loss=args.dense_loss, epochs=args.dense_epochs), progress=False)
        card = json.loads((model / "ldr-train.json").read_text())
        row["dense_train_s"], row["dense_steps"], row["dense_dev"] = card["seconds"], card["steps"], card["dev"]
        adapted = work / f"adapted-idx-{f}"
        t = time.perf_counter()
        if not adapted.exists():
            ldr.Index.build(data / "corpus.jsonl", adapted, dense=DenseSettings(model=str(model)))
        row["adapted_build_s"] = round(time.perf_counter() - t, 1)
        new = ldr.Index(adapted)
        runs = {"bm25": base_runs["bm25"], "sparse": base_runs["sparse"],
                "dense": retriever_runs(new, queries, qids, ["dense"])["dense"]}
        row["dense_trained"] = mean_ndcg(qrels, runs["dense"], test)
        rep = tune(new, queries, {q: qrels[q] for q in train_q}, TuneOptions(rerank_depths=(), progress=False),
                   runs=runs)
        new.set_search_defaults(as_search_defaults(rep["chosen"], new.manifest.get("search", {})),
                                {"tuned": describe(rep["chosen"])})
        row["adapted_setting"] = describe(rep["chosen"])
        row["adapted_fused"] = mean_ndcg(qrels, fused(runs, test, rep["chosen"]), test)
        print(f"fold {f}: dense {row['dense_base']:.2f} -> {row['dense_trained']:.2f}; adapted index fused "
              f"{row['adapted_fused']:.2f} ({row['adapted_setting']})", flush=True)
        save(f, row)
        if "reranker" not in args.parts.split(","):
            continue

        # the reranker, its share chosen on a sample of the training queries
        model = work / f"reranker-{f}"
        if not (model / "ldr-train.json").is_file():
            train("reranker", data, model, split=args.split, indexes=ldr.Index, index_path=args.index, qids=train_q, mined=mined,
                  settings=RerankerTrainSettings(epochs=args.reranker_epochs, learning_rate=args.reranker_lr,
                                                 loss=args.reranker_loss, negatives=args.reranker_negatives,
                                                 max_length=args.reranker_max_length,
                                                 max_steps=args.reranker_steps,
                                                 eval_steps=10 if args.reranker_steps > 0 else None),
                  progress=False)
        card = json.loads((model / "ldr-train.json").read_text())
        row["reranker_train_s"], row["reranker_steps"], row["reranker_dev"] = card["seconds"], card["steps"], card["dev"]
        row["reranker_settings"] = card["settings"]
        # scores the first stage's best `--rerank-windows` passages of each document (default 8)
        new.reranker(None, str(model)).settings.max_windows = args.rerank_windows
        t = time.perf_counter()
        sample = {q: qrels[q] for q in random.Random(f).sample(train_q, min(args.rerank_tune_queries, len(train_q)))}
        rep = tune(new, queries, sample, TuneOptions(rerank_depths=(args.rerank_depth,), rerank_model=str(model),
                                                     rerank_only=True, progress=False))
        chosen = rep["chosen"]
        row["rerank_setting"] = describe(chosen)
        row["rerank_rejected"] = rep["rerank_rejected"]
        row["rerank_tune_candidates"] = rep["candidates"][:5]
        row["rerank_tune_s"] = round(time.perf_counter() - t, 1)
        t = time.perf_counter()
        first, alone = {}, {}
        for qid, res in new.search_many({q: queries[q] for q in test}, k=args.rerank_depth, rerank_model=str(model),
                                        rerank_depth=args.rerank_depth, rerank_weight=1.0):
            hits = list(res)
            alone[qid] = as_run([h.id for h in hits])
            first[qid] = hits
        row["reranked"] = mean_ndcg(qrels, alone, test)
        # every mixing weight on the held-out queries, whatever tune chose: was its choice right?
        row["mixed"] = {str(w): mean_ndcg(qrels, {q: as_run(_reweighted(h, w)[:10]) for q, h in first.items()}, test)
                        for w in (0.5, 0.25, 0.1)}
        row["rerank_eval_s"] = round(time.perf_counter() - t, 1)
        if chosen.get("rerank_model"):
            final = {q: as_run(_reweighted(h, chosen.get("rerank_weight", 1.0))[:10]) for q, h in first.items()}
        else:   # no reranking, or the passage rescorer: through the pipeline with the committed choice
            kw = {"rerank": chosen.get("rerank") or False, "rerank_depth": chosen.get("rerank_depth")}
            final = {qid: as_run([h.id for h in res])
                     for qid, res in new.search_many({q: queries[q] for q in test}, k=10, **kw)}
        row["final"] = mean_ndcg(qrels, final, test)
        print(f"fold {f}: reranked (top {args.rerank_depth}, cross-encoder alone) {row['reranked']:.2f}; final "
              f"pipeline {row['final']:.2f} ({row['rerank_setting']})", flush=True)
        save(f, row)

    report(out, args)


def report(out: dict, args) -> None:
    print(f"\n{len(out['folds'])} of {args.folds} folds, nDCG@10 on each fold's held-out queries (mean ± sd)")
    for k in LABELS:
        vals = [r[k] for r in out["folds"].values() if k in r]
        if vals:
            print(f"  {LABELS[k]:<38} {np.mean(vals):6.2f} ± {np.std(vals):.2f}  ({len(vals)} folds)")
    if out["folds"]:
        plot(out["folds"], Path(args.png))
        print(f"plot: {args.png}")


if __name__ == "__main__":
    sys.exit(main())
