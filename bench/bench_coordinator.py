"""What a coordinator holds (issue 55): a sharded index of N synthetic documents in S shards,
opened (1) in this process as `ldr.open` does (every shard local) and (2) as `ldr serve --ray`'s
coordinator (ray_shards.open_on_ray over one Serve replica per shard on a local Ray cluster), each in a
fresh process: its RSS before and after the open and after Q searches, the open's seconds, the
median search latency. Also the bytes a query's values take on the wire (each Shard call's
arguments and answer, pickled) and the fan-out's cost against the unsharded index of the same
documents (median latency, same process, same queries).

    python bench/bench_coordinator.py --docs 10000,100000 --shards 4
"""
from __future__ import annotations

import argparse
import json
import os
import pickle
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORDS = [f"w{i}" for i in range(20000)]


def corpus(n: int, seed: int = 0):
    import ldr

    rnd = random.Random(seed)
    for i in range(n):
        # lengths vary (30 to 89 words), as documents' do: equal lengths make BM25 scores tie in tiers
        yield ldr.Doc(f"doc-{i:07d}", " ".join(rnd.choices(WORDS[:5000], k=20 + rnd.randrange(50))
                                               + rnd.choices(WORDS, k=10 + rnd.randrange(10))),
                      f"Document {i}", {"bucket": str(i % 7)})


def queries(q: int, seed: int = 1) -> list[str]:
    rnd = random.Random(seed)
    return [" ".join(rnd.choices(WORDS[:5000], k=3)) for _ in range(q)]


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


CHILD = r'''
import json, statistics, sys, time
sys.path.insert(0, {bench!r})
from bench_coordinator import queries, rss_mb
import ldr
mode, path, n_q = {mode!r}, {path!r}, {q}
before = rss_mb()
t = time.perf_counter()
if mode == "local":
    ix = ldr.open(path)
else:
    import logging, ray
    ray.init(num_cpus=4, logging_level=logging.WARNING, log_to_driver=False)
    from ldr.serve.ray_shards import deploy, open_on_ray
    handles = deploy(path, None, 1)
    before = rss_mb()          # Ray's driver and Serve's handles, before the index
    t = time.perf_counter()
    ix = open_on_ray(path, handles)
opened = time.perf_counter() - t
after_open = rss_mb()
qs = queries(n_q)
ix.search(qs[0])
lat, rounds = [], []
for q in qs:
    t = time.perf_counter()
    r = ix.search(q, k=10, filters={{"bucket": "3"}} if len(lat) % 2 else None)
    lat.append(time.perf_counter() - t)
    rounds.append(r.rounds)
print(json.dumps({{"mode": mode, "open_s": round(opened, 3), "rss_before_mb": round(before, 1),
                  "rss_open_mb": round(after_open, 1), "rss_searched_mb": round(rss_mb(), 1),
                  "search_ms_median": round(1e3 * statistics.median(lat), 2), "documents": len(ix),
                  "rounds_median": statistics.median(rounds), "rounds_max": max(rounds)}}))
'''


class Counting:
    """A Shard whose calls' arguments and answers are pickled and counted (what crosses the wire)."""

    def __init__(self, inner, tally: dict):
        self.inner, self.tally = inner, tally

    def __getattr__(self, name):
        fn = getattr(self.inner, name)
        if name not in ("describe", "stats", "first", "windows", "exact", "fetch"):
            return fn

        def call(*args, **kw):
            out = fn(*args, **kw)
            self.tally[name] = self.tally.get(name, 0) + len(pickle.dumps((args, kw))) + len(pickle.dumps(out))
            return out
        return call


def wire_and_fanout(path: Path, one: Path, n_q: int) -> dict:
    import statistics

    import ldr

    sharded, single = ldr.open(path), ldr.open(one)
    qs = queries(n_q, seed=2)
    tally: dict = {}
    snap = sharded._snapshot()
    inner, snap.shards = snap.shards, [Counting(s, tally) for s in snap.shards]
    snap.remote = True      # the calls as a Ray coordinator makes them (the window features with the first stages)
    for q in qs:
        sharded.search(q, k=10, passages=1)
    snap.shards, snap.remote = inner, False
    per_query = {k: round(v / n_q) for k, v in tally.items()}
    lat = {"sharded": [], "one": []}
    for ix, name in ((single, "one"), (sharded, "sharded")):
        ix.search(qs[0])
    for q in qs:
        for ix, name in ((single, "one"), (sharded, "sharded")):
            t = time.perf_counter()
            ix.search(q, k=10, passages=1)
            lat[name].append(time.perf_counter() - t)
    med = {k: statistics.median(v) * 1e3 for k, v in lat.items()}
    return {"bytes_per_query": per_query, "bytes_per_query_total": sum(per_query.values()),
            "search_ms_one": round(med["one"], 2), "search_ms_sharded_local": round(med["sharded"], 2),
            "fanout_ratio": round(med["sharded"] / med["one"], 2)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", default="10000,100000")
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--work", default=None)
    ap.add_argument("--out", default=str(Path(__file__).parent / "figures" / "bench_coordinator.json"))
    a = ap.parse_args()
    from ldr.sharded import ShardedIndex

    import ldr

    work = Path(a.work or tempfile.mkdtemp(prefix="ldr-coord-"))
    rows = []
    for n in [int(x) for x in a.docs.split(",")]:
        path, one = work / f"s{n}", work / f"one{n}"
        t = time.perf_counter()
        if not path.exists():
            ShardedIndex.build(corpus(n), path, shards=a.shards, dense=None, sparse=None)
        if not one.exists():
            ldr.Index.build(corpus(n), one, dense=None, sparse=None)
        row = {"documents": n, "shards": a.shards, "build_s": round(time.perf_counter() - t, 1)}
        for mode in ("local", "ray"):
            code = CHILD.format(bench=str(Path(__file__).parent), mode=mode, path=str(path), q=a.queries)
            out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                 env={**os.environ, "RAY_DEDUP_LOGS": "0"})
            if out.returncode != 0:
                row[mode] = {"error": out.stderr[-800:]}
            else:
                row[mode] = json.loads(out.stdout.strip().splitlines()[-1])
            print(n, mode, row[mode], flush=True)
        row.update(wire_and_fanout(path, one, a.queries))
        print(json.dumps(row), flush=True)
        rows.append(row)
    Path(a.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
