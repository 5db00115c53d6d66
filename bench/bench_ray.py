"""`ldr index --ray` against a local build on this machine: the overhead, and 1 vs 2 workers.

Each build runs from the shell as users run it (`ldr index CORPUS -o IDX -q [--ray ...]`), one
after the other in one run, with the ONNX export already in the cache (a warm-up build does it),
so the figures compare the builds and not the one-time export. `--ray` without an address starts
a local Ray cluster inside the command: its start-up is part of the wall time.

Reported per build: wall seconds, the encode stage (Ray: staging done → every shard back), model
tokens per second overall and per worker, and the agreement with the local build on the corpus's
queries (fused top-10 identical, nDCG@10 of both).

    python bench/bench_ray.py [--data ../shared/data/qmsum-train/corpus.jsonl] [--docs 60] [--queries 200]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = {
    "local": [],
    "ray, 1 worker x 2 CPUs": ["--ray", "--ray-workers", "1", "--ray-cpus-per-worker", "2"],
    "ray, 2 workers x 1 CPU": ["--ray", "--ray-workers", "2", "--ray-cpus-per-worker", "1"],
}


def ldr_cmd(*args) -> list[str]:
    return [sys.executable, "-m", "ldr.cli", *map(str, args)]


def build(corpus: Path, out: Path, extra: list[str], env: dict) -> dict:
    t = time.perf_counter()
    subprocess.run(ldr_cmd("index", corpus, "-o", out, "-q", *extra), env=env, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t
    m = json.loads(sorted(out.glob("manifest-*.json"))[-1].read_text())
    b = m["settings"]["build"]
    ray = b.get("ray")
    if ray:
        encode_s, tokens, workers = b["stages"]["encode"], ray["tokens"], ray["workers"]
    else:   # a local build: the encode worker's busy time, tokens counted as the Ray workers count them
        encode_s, tokens, workers = b["stages"]["encode"], None, 1
    return {"wall_s": wall, "build_s": b["seconds"], "encode_s": encode_s, "tokens": tokens, "workers": workers,
            "segments": len(m["segments"]), "shards": ray["shards"] if ray else 1}


def tokens_of(corpus: Path) -> int:
    """Model input tokens of the dense encoder over the corpus, as a build counts them."""
    import ldr
    from ldr.encode.dense import DenseSettings, load_dense
    from ldr.encode.pipeline import doc_text

    enc = load_dense(DenseSettings())
    n = 0
    for line in open(corpus, encoding="utf-8"):
        r = json.loads(line)
        job = enc.prepare_documents([doc_text(ldr.Doc(r["_id"] if "_id" in r else r["id"], r["text"],
                                                      r.get("title", "")))], spans=True)
        n += sum(map(len, job[1]))
    return n


def agreement(a: Path, b: Path, queries: list[tuple[str, str]], qrels: dict) -> dict:
    import ldr
    from ldr.eval.metrics import evaluate

    ia, ib = ldr.Index(a), ldr.Index(b)
    same, runs = 0, ({}, {})
    for (qid, q) in queries:
        ha, hb = ia.search(q, k=10), ib.search(q, k=10)
        same += [h.id for h in ha] == [h.id for h in hb]
        runs[0][qid], runs[1][qid] = {h.id: h.score for h in ha}, {h.id: h.score for h in hb}
    nd = [100 * evaluate({q: qrels[q] for q in r if q in qrels}, r, metrics=("ndcg@10",))["ndcg@10"] for r in runs]
    return {"top10_identical": same / len(queries), "ndcg@10": nd}


def plot(rows: dict, png: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(rows)
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.6))
    a1.barh(names, [rows[n]["wall_s"] for n in names], color="#4c72b0")
    a1.set_xlabel("ldr index wall time (s)")
    a2.barh(names, [rows[n]["tokens_per_s"] for n in names], color="#55a868")
    a2.set_xlabel("model tokens / s while encoding")
    for ax in (a1, a2):
        ax.invert_yaxis()
    fig.suptitle("local build vs --ray on this machine (same corpus, same run)")
    fig.tight_layout()
    fig.savefig(png, dpi=120)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=str(ROOT.parent / "shared/data/qmsum-train/corpus.jsonl"))
    ap.add_argument("--docs", type=int, default=60, help="first N documents of the corpus (0: all)")
    ap.add_argument("--queries", type=int, default=200, help="queries for the agreement check")
    ap.add_argument("--json", default=str(ROOT / "bench/results/ray.json"))
    ap.add_argument("--png", default=str(ROOT / "bench/figures/ray.png"))
    args = ap.parse_args()
    data = Path(args.data)
    from ldr.eval.beir import load_qrels, load_queries

    qrels = load_qrels(data.parent)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        corpus = tmp / "corpus.jsonl"
        lines = data.read_text(encoding="utf-8").splitlines()
        lines = lines[:args.docs] if args.docs else lines
        corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
        ids = {json.loads(x).get("_id") for x in lines}
        queries = [(q, t) for q, t in load_queries(data.parent).items()
                   if q in qrels and set(qrels[q]) & ids][:args.queries]
        qrels = {q: {d: r for d, r in qrels[q].items() if d in ids} for q, _ in queries}
        env = dict(os.environ, LDR_CACHE_DIR=str(tmp / "cache"))
        warm = tmp / "warm.jsonl"
        warm.write_text(lines[0] + "\n", encoding="utf-8")
        subprocess.run(ldr_cmd("index", warm, "-o", tmp / "warm", "-q"), env=env, check=True,
                       stdout=subprocess.DEVNULL)
        os.environ["LDR_CACHE_DIR"] = env["LDR_CACHE_DIR"]
        total_tokens = tokens_of(corpus)
        rows = {}
        for name, extra in CONFIGS.items():
            print(f"building: {name} ...", flush=True)
            rows[name] = build(corpus, tmp / f"idx-{len(rows)}", extra, env)
            r = rows[name]
            r["tokens"] = r["tokens"] or total_tokens
            r["tokens_per_s"] = r["tokens"] / r["encode_s"]
            r["tokens_per_s_per_worker"] = r["tokens_per_s"] / r["workers"]
        for i, name in enumerate(list(rows)[1:], 1):
            rows[name]["agreement"] = agreement(tmp / "idx-0", tmp / f"idx-{i}", queries, qrels)
    local = rows["local"]
    print(f"\n{len(lines)} documents of {data.parent.name}, {total_tokens:,} dense model tokens; "
          f"{os.cpu_count()} CPUs; same run")
    print("| build | wall s | vs local | encode s | tokens/s | per worker | shards | fused top-10 = local | nDCG@10 |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, r in rows.items():
        ag = r.get("agreement")
        print(f"| {name} | {r['wall_s']:.1f} | {r['wall_s'] / local['wall_s']:.2f}x | {r['encode_s']:.1f} | "
              f"{r['tokens_per_s']:,.0f} | {r['tokens_per_s_per_worker']:,.0f} | {r['shards']} | "
              + (f"{100 * ag['top10_identical']:.0f}% of {len(queries)} | {ag['ndcg@10'][1]:.2f} (local "
                 f"{ag['ndcg@10'][0]:.2f})" if ag else "- | -") + " |")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(rows, indent=1))
    plot(rows, Path(args.png))
    print(f"written: {args.json}, {args.png}")


if __name__ == "__main__":
    main()
