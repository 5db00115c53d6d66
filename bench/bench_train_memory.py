"""Peak memory and time of `ldr train reranker` (listwise mnrl) with and without `--mini-batch-size`.

Each setting trains in its own process for a few steps on the same qmsum-train examples (mined
once by this script, or taken from bench_train_cv.py's cache); its peak RSS comes from the kernel
(wait4's ru_maxrss), its time and mean loss from the model card. The same seed gives every
setting the same batches, so the losses show whether the cached loss makes the same update.

    python bench/bench_train_memory.py --index /tmp/cv/base-idx [--steps 10] [--mini-batches none,16,4]
"""
from __future__ import annotations

import argparse
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def child(args) -> None:
    from ldr.train.reranker import RerankerTrainSettings
    import ldr
    from ldr.train.run import train

    mined = pickle.loads(Path(args.mined).read_bytes())
    qids = sorted(mined)[:args.queries]
    mb = None if args.child == "none" else int(args.child)
    info = train("reranker", Path(args.data), Path(args.model), split=args.split, indexes=ldr.Index, index_path=args.index, qids=qids,
                 mined=mined, progress=False,
                 settings=RerankerTrainSettings(max_steps=args.steps, eval_steps=10 * args.steps, mini_batch=mb))
    print("RESULT " + json.dumps({"seconds": info["seconds"], "steps": info["steps"], "loss": info["train_loss"]}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=str(ROOT.parent / "shared/data/qmsum-train"))
    ap.add_argument("--split", default="test")
    ap.add_argument("--index", required=True, help="a default `ldr index` of DATA/corpus.jsonl")
    ap.add_argument("--mined", default="/tmp/ldr-cv/base-runs.pkl",
                    help="bench_train_cv.py's cache, or where to keep the examples this script mines")
    ap.add_argument("--queries", type=int, default=400, help="training queries (10%% held out as dev)")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--mini-batches", default="none,16,4")
    ap.add_argument("--json", default=str(ROOT / "bench/results/train_memory.json"))
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--model", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args)

    work = Path(tempfile.mkdtemp(prefix="ldr-train-mem-"))
    cache = Path(args.mined)
    if cache.is_file() and isinstance(loaded := pickle.loads(cache.read_bytes()), tuple):
        cache, mined = work / "mined.pkl", loaded[1]      # bench_train_cv.py stores (runs, examples)
        cache.write_bytes(pickle.dumps(mined))
    elif not cache.is_file():
        import ldr
        from ldr.eval.beir import load_qrels, load_queries
        from ldr.train.mining import mine

        queries, qrels = load_queries(Path(args.data)), load_qrels(Path(args.data), args.split)
        qids = sorted(q for q in qrels if q in queries)[:args.queries]
        examples, _ = mine(ldr.Index(args.index), queries, qrels, qids, negatives=4, progress=True)
        cache.write_bytes(pickle.dumps({ex.qid: ex for ex in examples}))
    rows = []
    for mb in args.mini_batches.split(","):
        cmd = [sys.executable, __file__, "--child", mb, "--model", str(work / f"model-{mb}"), "--mined", str(cache),
               "--data", args.data, "--split", args.split, "--index", args.index, "--queries", str(args.queries),
               "--steps", str(args.steps)]
        t = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        out = proc.stdout.read()
        _, status, usage = os.wait4(proc.pid, 0)
        result = [json.loads(line[7:]) for line in out.splitlines() if line.startswith("RESULT ")]
        if status != 0 or not result:
            raise SystemExit(f"mini-batch {mb}: the training failed (exit status {status})")
        row = {"mini_batch": mb, "peak_rss_gb": round(usage.ru_maxrss / 2**20, 2),
               "wall_s": round(time.perf_counter() - t, 1), **result[0]}
        row["s_per_step"] = round(row["seconds"] / max(row["steps"], 1), 1)
        rows.append(row)
        print(f"mini-batch {mb:>4}: peak {row['peak_rss_gb']:.2f} GB, {row['s_per_step']:.1f} s/step, "
              f"mean loss {row['loss']:.4f}", flush=True)
    base = rows[0]
    for r in rows:
        r["time_ratio"] = round(r["s_per_step"] / base["s_per_step"], 2)
        r["memory_ratio"] = round(r["peak_rss_gb"] / base["peak_rss_gb"], 2)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps({"settings": {k: v for k, v in vars(args).items() if k not in
                                                        ("child", "model")}, "rows": rows}, indent=1))
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
