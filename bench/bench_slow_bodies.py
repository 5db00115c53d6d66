"""Unauthenticated memory through slow bodies (issue 57 item 2): N clients each send a POST
/documents body just under the 32 MB limit and withhold its last bytes. Reported: the server's RSS
before, while they hold their connections, and after they close (a real `ldr serve`, default
limits, BM25-only index of the sample corpus).

    python bench/bench_slow_bodies.py --clients 20 [--ldr-src OTHER_CHECKOUT]
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def rss_mb(pid: int) -> float:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--hold", type=float, default=20.0, help="seconds the clients hold their bodies")
    ap.add_argument("--ldr-src", default=str(ROOT))
    a = ap.parse_args()
    env = {**os.environ, "PYTHONPATH": a.ldr_src, "LDR_API_KEY": ""}
    tmp = Path(tempfile.mkdtemp())
    subprocess.run([sys.executable, "-m", "ldr.cli", "index", str(ROOT / "corpora" / "sample"), "-o", str(tmp / "idx"),
                    "--dense", "none", "--sparse", "none", "-q"], check=True, env=env, cwd=a.ldr_src)
    port = 18000 + os.getpid() % 1000
    srv = subprocess.Popen([sys.executable, "-m", "ldr.cli", "serve", "-i", str(tmp / "idx"), "--port", str(port)],
                           env=env, cwd=a.ldr_src, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        import httpx
        for _ in range(200):
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        before = rss_mb(srv.pid)
        size = (32 << 20) - 1024
        socks, statuses = [], []
        for _ in range(a.clients):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(f"POST /documents HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
                      f"Content-Length: {size}\r\n\r\n".encode())
            try:
                s.settimeout(5)
                s.sendall(b" " * (size - 16))           # the last bytes withheld
            except OSError:
                pass
            socks.append(s)
        time.sleep(3)
        held = rss_mb(srv.pid)
        peak = held
        t_end = time.time() + a.hold
        while time.time() < t_end:
            peak = max(peak, rss_mb(srv.pid))
            time.sleep(0.5)
        for s in socks:
            try:
                s.settimeout(0.2)
                statuses.append(s.recv(64).decode("latin-1").split(" ")[1])
            except (OSError, IndexError):
                statuses.append("none")
            s.close()
        time.sleep(5)
        after = rss_mb(srv.pid)
        print(json.dumps({"clients": a.clients, "rss_mb": {"before": round(before), "holding": round(held),
                                                           "peak": round(peak), "after_close": round(after)},
                          "answers": {s: statuses.count(s) for s in set(statuses)}}))
    finally:
        srv.terminate()
        srv.wait()


if __name__ == "__main__":
    main()
