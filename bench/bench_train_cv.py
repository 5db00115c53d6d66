"""Cross-validated domain adaptation on qmsum-train: `ldr tune`, `ldr train dense`, `ldr train reranker`.

The queries are split in K folds (seeded). For each fold, everything is chosen or trained on the
other folds' queries only (the dev split for early stopping is carved from those), and scored
on the fold's queries (nDCG@10):
- defaults: the index as built (minmax fusion 1/¼/¼, no rerank);
- tuned: `ldr tune`'s choice on the training queries;
- dense: the dense stage alone, base model vs the model `ldr train dense` made (the corpus
  re-encoded with it);
- fused with the trained dense model: BM25 and SPLADE runs of the base index fused with the new
  dense run by the tuned setting (offline fusion ranks exactly as the pipeline: tests/test_tune.py);
- reranked: the default fusion's top `--rerank-depth` reranked by the cross-encoder `ldr train
  reranker` made, through the real search pipeline.
Mean and spread over the folds run are printed and written as JSON.

    python bench/bench_train_cv.py --index IDX [--folds 5] [--only 0,1] [--parts tune,dense,reranker]
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def ndcg(qrels, run, qids) -> dict[str, float]:
    from ldr.eval.metrics import evaluate_per_query
    return {q: v["ndcg@10"] for q, v in evaluate_per_query({q: qrels[q] for q in qids}, run, ("ndcg@10",)).items()}


def search_run(index, queries, qids, k=10, **kw) -> dict:
    run = {}
    for qid, res in index.search_many({q: queries[q] for q in qids}, k=k, **kw):
        hits = [] if isinstance(res, Exception) else list(res)
        run[qid] = {h.id: float(len(hits) - r) for r, h in enumerate(hits)}
    return run


def retriever_runs(index, queries, qids, names) -> dict:
    depth = min(1000, len(index))
    return {n: {qid: ({} if isinstance(r, Exception) else {h.id: h.score for h in r})
                for qid, r in index.search_many({q: queries[q] for q in qids}, k=depth, mode=n, rerank=False)}
            for n in names}


def fused(runs: dict, qids, setting: dict) -> dict:
    from ldr.search.tune import _Offline
    names = list(runs)
    off = _Offline(runs, names, qids)
    w = np.array([[setting["weights"].get(n, 0.0) for n in names]])
    return off.runs(setting["fusion"], setting.get("rrf_k", 60), w, 10)[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=str(ROOT.parent / "shared/data/qmsum-train"))
    ap.add_argument("--split", default="test")
    ap.add_argument("--index", required=True, help="a default `ldr index` of DATA/corpus.jsonl")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--only", default=None, help="run only these folds, e.g. 0,1")
    ap.add_argument("--parts", default="tune,dense,reranker")
    ap.add_argument("--work", default="/tmp/ldr-cv")
    ap.add_argument("--rerank-depth", type=int, default=20)
    ap.add_argument("--dense-epochs", type=float, default=1.0)
    ap.add_argument("--dense-loss", default="mnrl")
    ap.add_argument("--reranker-epochs", type=float, default=1.0)
    ap.add_argument("--reranker-max-steps", type=int, default=-1)
    ap.add_argument("--json", default=str(ROOT / "bench/results/train_cv.json"))
    args = ap.parse_args()

    import ldr
    from ldr.encode.dense import DenseSettings
    from ldr.eval.beir import load_qrels, load_queries
    from ldr.search.tune import TuneOptions, describe, tune
    from ldr.train.dense import DenseTrainSettings
    from ldr.train.reranker import RerankerTrainSettings
    from ldr.train.run import train

    data, work = Path(args.data), Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    queries, qrels = load_queries(data), load_qrels(data, args.split)
    qids = sorted(q for q in qrels if q in queries)
    rng = random.Random(0)
    shuffled = qids[:]
    rng.shuffle(shuffled)
    folds = [sorted(shuffled[i::args.folds]) for i in range(args.folds)]
    parts = set(args.parts.split(","))
    index = ldr.Index(args.index)
    names = ["bm25", "dense", "sparse"]
    print("base runs of every retriever ...", flush=True)
    base_runs = retriever_runs(index, queries, qids, names)
    default = index.search_defaults()
    default_setting = {"fusion": default["fusion"], "weights": default["weights"], "rrf_k": default["rrf_k"]}
    out = json.loads(Path(args.json).read_text()) if Path(args.json).is_file() else {}
    out.setdefault("folds", {})
    for f in [int(x) for x in args.only.split(",")] if args.only else range(args.folds):
        test = folds[f]
        train_q = sorted(set(qids) - set(test))
        row = {"test_queries": len(test), "train_queries": len(train_q)}
        row["defaults"] = 100 * np.mean(list(ndcg(qrels, fused(base_runs, test, default_setting), test).values()))
        row["dense_base"] = 100 * np.mean(list(ndcg(qrels, {q: base_runs["dense"][q] for q in test}, test).values()))
        tuned_setting = default_setting
        if "tune" in parts:
            t = time.perf_counter()
            rep = tune(index, queries, {q: qrels[q] for q in train_q}, TuneOptions(rerank_depths=(), progress=False))
            tuned_setting = rep["chosen"]
            row["tuned_setting"] = describe(tuned_setting)
            row["tuned"] = 100 * np.mean(list(ndcg(qrels, fused(base_runs, test, tuned_setting), test).values()))
            row["tune_s"] = round(time.perf_counter() - t, 1)
            print(f"fold {f}: tuned {row['tuned']:.2f} vs defaults {row['defaults']:.2f} ({row['tuned_setting']})",
                  flush=True)
        if "dense" in parts:
            model = work / f"dense-{f}"
            info = train("dense", data, model, split=args.split, index_path=args.index, qids=train_q,
                         settings=DenseTrainSettings(loss=args.dense_loss, epochs=args.dense_epochs), progress=False)
            row["dense_train_s"], row["dense_dev"] = info["seconds"] + info["mining_seconds"], info["dev"]
            t = time.perf_counter()
            didx = work / f"dense-idx-{f}"
            if not didx.exists():
                ldr.Index.build(data / "corpus.jsonl", didx, dense=DenseSettings(model=str(model)), sparse=None,
                                bm25=None)
            row["dense_encode_s"] = round(time.perf_counter() - t, 1)
            new = ldr.Index(didx)
            new_dense = retriever_runs(new, queries, test, ["dense"])["dense"]
            row["dense_trained"] = 100 * np.mean(list(ndcg(qrels, {q: new_dense[q] for q in test}, test).values()))
            runs = {"bm25": base_runs["bm25"], "dense": new_dense, "sparse": base_runs["sparse"]}
            row["fused_trained_dense"] = 100 * np.mean(list(ndcg(qrels, fused(runs, test, tuned_setting),
                                                                test).values()))
            print(f"fold {f}: dense {row['dense_base']:.2f} -> {row['dense_trained']:.2f}; fused with it "
                  f"{row['fused_trained_dense']:.2f}", flush=True)
        if "reranker" in parts:
            model = work / f"reranker-{f}"
            info = train("reranker", data, model, split=args.split, index_path=args.index, qids=train_q,
                         settings=RerankerTrainSettings(epochs=args.reranker_epochs,
                                                        max_steps=args.reranker_max_steps), progress=False)
            row["reranker_train_s"], row["reranker_dev"] = info["seconds"] + info["mining_seconds"], info["dev"]
            t = time.perf_counter()
            run = search_run(index, queries, test, rerank_model=str(model), rerank_depth=args.rerank_depth,
                             fusion=tuned_setting["fusion"], weights=tuned_setting["weights"],
                             rrf_k=tuned_setting.get("rrf_k", 60))
            row["reranked"] = 100 * np.mean(list(ndcg(qrels, run, test).values()))
            row["rerank_eval_s"] = round(time.perf_counter() - t, 1)
            print(f"fold {f}: reranked (top {args.rerank_depth}) {row['reranked']:.2f}", flush=True)
        out["folds"][str(f)] = row
        out["settings"] = vars(args)
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(out, indent=1, default=float))
    keys = ["defaults", "tuned", "dense_base", "dense_trained", "fused_trained_dense", "reranked"]
    print(f"\n{len(out['folds'])} of {args.folds} folds, nDCG@10 on each fold's held-out queries (mean ± sd)")
    for k in keys:
        vals = [r[k] for r in out["folds"].values() if k in r]
        if vals:
            print(f"  {k:<22} {np.mean(vals):6.2f} ± {np.std(vals):.2f}  ({len(vals)} folds)")


if __name__ == "__main__":
    sys.exit(main())
