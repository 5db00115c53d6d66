"""What a shard replica holds in memory: a fresh process opens a sharded index's shard 0 as a Ray
Serve replica does (ldr/serve/ray_shards.ShardReplica, here without Ray) and answers a default
search's shard calls (statistics, first stages, window features, fetch) for queries whose
encodings the coordinator (this process) sends. Prints its peak and final RSS, the time of
its first query's calls and of all of them, the heavy modules it imported and the models it loaded.

    python bench/bench_replica_memory.py SHARDED_INDEX [--queries FILE.jsonl] [-n 20]
"""
from __future__ import annotations

import argparse
import json
import pickle
import subprocess
import sys

CHILD = r"""
import asyncio, json, pickle, resource, sys, time
from ldr.serve.ray_shards import ShardReplica
from ldr.components import ENCODERS

root, entry, asks = pickle.load(sys.stdin.buffer)
replica = ShardReplica(root, 0)
t0, first_s = time.perf_counter(), None
for first, reps, terms in asks:       # a query's calls are coroutines, as Serve runs them
    asyncio.run(replica.stats(entry, first.query, ["bm25"], None))
    got = asyncio.run(replica.first(entry, first, reps, None))
    docs = sorted(got.ids)[:10]
    kinds = [k for k in reps if k != "bm25"]
    asyncio.run(replica.windows(entry, docs, kinds, reps, terms))
    asyncio.run(replica.fetch(entry, docs[:5], text=True))
    first_s = first_s or time.perf_counter() - t0
rss = int(next(l for l in open("/proc/self/status") if l.startswith("VmRSS")).split()[1]) / 1024
heavy = [m for m in ("torch", "transformers", "onnxruntime", "sentence_transformers") if m in sys.modules]
print(json.dumps({"peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                  "rss_mb": round(rss, 1), "first_query_s": round(first_s, 3),
                  "queries_s": round(time.perf_counter() - t0, 3), "heavy": heavy,
                  "models": len(ENCODERS.loaded())}))
"""


def encode(ix, kind: str, q: str):
    side = getattr(ix, "query_side", None)
    return side(kind).encode(q) if side is not None else ix.shards[0].retriever(kind).encode(q)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("index", help="a sharded index (ldr index --shards N)")
    ap.add_argument("--queries", help="JSONL with a `text` per line (default: a few fixed questions)")
    ap.add_argument("-n", type=int, default=20)
    a = ap.parse_args()
    import ldr

    ix = ldr.open(a.index)
    queries = [json.loads(line)["text"] for line in open(a.queries, encoding="utf-8")][:a.n] if a.queries else \
        ["what did the group decide about the remote control's battery", "who presented the budget",
         "when is the next meeting", "which materials were chosen for the case"][:a.n]
    entry = ix.cluster["shards"][0]
    asks = []
    for q in queries:
        first, _ = ix.plan(q, k=10).split()
        reps = {k: encode(ix, k, q) for k in first.kinds}
        terms = ix.shards[0].as_shard()._finder(["dense"]).term_list(q)
        asks.append((first, reps, terms))
    r = subprocess.run([sys.executable, "-c", CHILD], input=pickle.dumps((str(a.index), entry, asks)),
                       capture_output=True)
    if r.returncode:
        sys.exit(r.stderr.decode()[-3000:])
    print(r.stdout.decode().strip())


if __name__ == "__main__":
    main()
