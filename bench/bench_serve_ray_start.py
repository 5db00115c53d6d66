"""Time from starting `ldr serve -i IDX --ray ADDRESS` to its first healthy answer, on a Ray cluster
that has no ldr application deployed (they are deleted first): what a user waits for when a server
starts or restarts. One run per call, its seconds appended to --out; run it under a whole-process
timer for A/B comparisons.

    ray start --head --num-cpus 2 --include-dashboard false
    python bench/bench_serve_ray_start.py --address 127.0.0.1:6379 --shards 4 --work /tmp/ldr-serve-start
"""
from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _index(work: Path, shards: int) -> Path:
    """A BM25-only sharded index of the sample corpus (the encoders' load is not what is timed)."""
    path = work / f"idx-{shards}"
    if not path.exists():
        sys.path.insert(0, str(ROOT))
        from ldr.sharded import ShardedIndex
        ShardedIndex.build(ROOT / "corpora" / "sample", path, shards=shards,
                           dense=None, sparse=None, progress=False)
    return path


def _clear(address: str) -> None:
    """No ldr application left from an earlier run: each run deploys from nothing."""
    code = ("import ray\nfrom ray import serve\n"
            f"ray.init(address={address!r}, logging_level='ERROR', log_to_driver=False)\n"
            "for name in list(serve.status().applications):\n"
            "    if name.startswith('ldr-shard-'):\n"
            "        serve.delete(name)\n")
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--address", required=True)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--replicas", type=int, default=1)
    ap.add_argument("--work", default="/tmp/ldr-serve-start")
    ap.add_argument("--out", default=None, help="append the seconds to this file")
    a = ap.parse_args()
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    idx = _index(work, a.shards)
    _clear(a.address)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    import httpx
    t = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "ldr.cli", "serve", "-i", str(idx), "--port", str(port),
                             "--ray", a.address, "--replicas", str(a.replicas), "--read-only"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "LDR_API_KEY": ""})
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}") as http:
            while True:
                if proc.poll() is not None:
                    raise SystemExit("the server exited")
                try:
                    if http.get("/health", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.1)
        took = time.perf_counter() - t
    finally:
        proc.terminate()
        proc.wait(60)
    line = f"{a.shards} shards x {a.replicas} replica(s): healthy after {took:.2f} s"
    print(line)
    if a.out:
        with open(a.out, "a") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    main()
