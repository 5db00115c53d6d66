"""Throughput of `ldr serve --ray` for 1 / 2 / 4 shards × 1 / 2 replicas on a local Ray cluster,
with the in-process sharded search (threads) and the unsharded index as baselines, in one run.
BM25-only indexes of a BEIR corpus (qmsum-train), so the figures are the fan-out's cost, not the
encoders'. Queries are sent by 8 concurrent HTTP clients for `--seconds` per setting.

    python bench/bench_ray_serve.py --data ../shared/data/qmsum-train --work /tmp/ldr-ray-serve
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import ldr  # noqa: E402
from ldr.eval.beir import load_queries  # noqa: E402
from ldr.sharded import ShardedIndex  # noqa: E402

BM25 = {"dense": None, "sparse": None, "bm25": "native"}


def port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def load(url: str, queries: list[str], seconds: float, clients: int = 8) -> dict:
    import httpx

    lat, errors, stop = [], [], threading.Event()

    def client(n):
        with httpx.Client(base_url=url, timeout=120) as c:
            i = n
            while not stop.is_set():
                t = time.perf_counter()
                try:
                    r = c.post("/search", json={"query": queries[i % len(queries)], "k": 10, "passages": 0})
                except httpx.HTTPError as e:         # a connection the server reset: a failed request
                    errors.append(type(e).__name__)
                    continue
                finally:
                    i += clients
                lat.append(time.perf_counter() - t)
                if r.status_code != 200 or r.json().get("missing_shards"):
                    errors.append(r.status_code)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    return {"qps": round(len(lat) / wall, 1), "p50_ms": round(1e3 * statistics.median(lat), 1),
            "p95_ms": round(1e3 * sorted(lat)[int(0.95 * (len(lat) - 1))], 1), "errors": len(errors)}


def serve(idx: Path, extra: list[str]) -> tuple[subprocess.Popen, str]:
    import httpx

    p = port()
    proc = subprocess.Popen([sys.executable, "-m", "ldr.cli", "serve", "-i", str(idx), "--port", str(p), *extra],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "LDR_API_KEY": ""})
    url = f"http://127.0.0.1:{p}"
    for _ in range(1200):
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.5)
    raise RuntimeError("server did not start")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--work", default="/tmp/ldr-ray-serve")
    ap.add_argument("--seconds", type=float, default=20)
    a = ap.parse_args()
    import ray

    work = Path(a.work)
    queries = list(load_queries(Path(a.data)).values())[:200]
    corpus = Path(a.data) / "corpus.jsonl"
    if not (work / "one").is_dir():
        ldr.Index.build(corpus, work / "one", **BM25)
    for n in (1, 2, 4):
        if not (work / f"s{n}").is_dir():
            ShardedIndex.build(corpus, work / f"s{n}", shards=n, **BM25)
    ray.init(num_cpus=os.cpu_count(), logging_level="ERROR", log_to_driver=False)
    address = ray.get_runtime_context().gcs_address
    rows = {}
    settings = [("unsharded", work / "one", [])] + [(f"{n} shards, threads", work / f"s{n}", []) for n in (1, 2, 4)] \
        + [(f"{n} shards x {r} replicas, Ray Serve", work / f"s{n}", ["--ray", address, "--replicas", str(r)])
           for n in (1, 2, 4) for r in (1, 2)]
    for label, idx, extra in settings:
        proc, url = serve(idx, extra)
        try:
            load(url, queries, 3)                       # warm: models, mapped files, replicas
            rows[label] = load(url, queries, a.seconds)
        finally:
            proc.terminate()
            proc.wait(timeout=60)
            if extra:
                from ray import serve as rs
                rs.shutdown()
        print(label, json.dumps(rows[label]), file=sys.stderr)
    print(json.dumps({"cpus": os.cpu_count(), "clients": 8, "seconds": a.seconds, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
