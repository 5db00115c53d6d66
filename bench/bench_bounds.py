"""A server's memory under clients that try to grow it (issue 42, items 1 and 2): a real
`ldr serve` (uvicorn, 127.0.0.1) on a 20-document BM25 index (default window stage on), then
  1. N searches each with a distinct filter (a glob of 1,000 characters, the largest accepted, or
     of 200 KB, refused), and
  2. N rounds of add-search-delete of a document with words of its own (the index stays at 20),
sampling the server's RSS (/proc) every 100 requests. Run with `--ldr-src DIR` to serve an older
tree's ldr instead (before/after).

    python bench/bench_bounds.py --rounds 2000 [--ldr-src /path/to/old/checkout]
"""
from __future__ import annotations

import argparse
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2000)
    ap.add_argument("--ldr-src", default=None, help="serve this checkout's ldr (PYTHONPATH)")
    ap.add_argument("--huge", action="store_true", help="200 KB globs (refused since issue 42) instead of 1,000")
    ap.add_argument("--words", type=int, default=1000, help="words of each churned document (issue 57: 5,000)")
    ap.add_argument("--churn-rounds", type=int, default=None, help="rounds of the churn part (default --rounds)")
    ap.add_argument("--no-filters", action="store_true", help="skip the filters part")
    args = ap.parse_args()
    env = {**os.environ, "LDR_API_KEY": ""}
    if args.ldr_src:
        env["PYTHONPATH"] = args.ldr_src
    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as tmp:
        idx = Path(tmp) / "idx"
        docs = "\n".join(f'{{"id": "d{i}", "text": "bridge report {i} on bearing corrosion", "path": "p/{i}"}}'
                         for i in range(20))
        (Path(tmp) / "c.jsonl").write_text(docs + "\n")
        subprocess.run([sys.executable, "-m", "ldr.cli", "index", str(Path(tmp) / "c.jsonl"), "-o", str(idx),
                        "--dense", "none", "--sparse", "none", "-q"], check=True, env=env)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        srv = subprocess.Popen([sys.executable, "-m", "ldr.cli", "serve", "-i", str(idx), "--port", str(port)],
                               env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"http://127.0.0.1:{port}"
        try:
            for _ in range(600):
                try:
                    if httpx.get(url + "/health", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.2)
            http = httpx.Client(base_url=url, timeout=120)
            print(f"start: {rss_mb(srv.pid):.0f} MB")
            size = 200_000 if args.huge else 1000
            t = time.perf_counter()
            codes: dict = {}
            for i in range(0 if args.no_filters else args.rounds):
                pat = "p/" + "".join(rng.choice("abcdefghij") for _ in range(size - 3)) + "*"
                r = http.post("/search", json={"query": "bridge", "filters": {"path": pat}})
                codes[r.status_code] = codes.get(r.status_code, 0) + 1
                if (i + 1) % 500 == 0:
                    print(f"filters {i + 1}: {rss_mb(srv.pid):.0f} MB")
            print(f"filters: {args.rounds} requests in {time.perf_counter() - t:.0f} s, answers {codes}, "
                  f"{rss_mb(srv.pid):.0f} MB")
            t = time.perf_counter()
            start = rss_mb(srv.pid)
            rounds = args.churn_rounds or args.rounds
            for i in range(rounds):
                words = " ".join(f"w{i}x{rng.randrange(10 ** 9)}" for _ in range(args.words))
                http.post("/documents", json={"documents": [{"id": "churn", "text": f"bridge {words}"}]})
                http.post("/search", json={"query": "bridge bearing", "k": 5})
                http.post("/documents/delete", json={"ids": ["churn"]})
                if (i + 1) % 50 == 0:
                    print(f"churn {i + 1}: {rss_mb(srv.pid):.0f} MB", flush=True)
            print(f"churn: {rounds} rounds of {args.words} words in {time.perf_counter() - t:.0f} s, "
                  f"{rss_mb(srv.pid):.0f} MB (+{rss_mb(srv.pid) - start:.0f} MB)")
        finally:
            srv.terminate()
            srv.wait(30)


if __name__ == "__main__":
    main()
