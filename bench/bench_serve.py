"""`ldr serve` under load: 8 concurrent clients for 60 s on the qmsum-train index, then the same
while POST /documents commits a new document every 5 s. Reports requests/s, p50/p99 latency,
errors, and checks that no answer mixes two generations (every hit of an answer is a document
of the generation the answer names, and the marker documents it returns are exactly those that
generation holds).

    python bench/bench_serve.py --index /tmp/qmsum-idx      # built there first if missing
"""
from __future__ import annotations

import argparse
import json
import os
import random
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
KEY = "bench-key"


def ensure_index(path: Path, corpus: Path) -> None:
    import ldr

    if not path.exists():
        t = time.perf_counter()
        ldr.Index.build(corpus, path, progress=True)
        print(f"built {path} in {time.perf_counter() - t:.0f} s", file=sys.stderr)


def start_server(index: Path) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen([sys.executable, "-m", "ldr.cli", "serve", "-i", str(index), "--port", str(port),
                             "--api-key", KEY], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t = time.perf_counter()
    while True:
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.2)
        if proc.poll() is not None:
            raise SystemExit("the server did not start")
    print(f"server ready in {time.perf_counter() - t:.1f} s (models loaded)", file=sys.stderr)
    return proc, url


def load(url: str, queries: list[str], seconds: float, clients: int, live_at: dict, marker: str,
         writer=None) -> dict:
    lat, errors, answers, stop = [], [], [], threading.Event()
    lock = threading.Lock()

    def client(seed: int):
        rng = random.Random(seed)
        with httpx.Client(base_url=url, timeout=120) as c:
            while not stop.is_set():
                # one request in ten asks for the marker documents (exactly those of its generation)
                q = marker if rng.random() < 0.1 else rng.choice(queries)
                body = {"query": q, "k": 10, "passages": 1} if q != marker else {"query": q, "k": 100, "mode": "bm25",
                                                                                   "passages": 0}
                t = time.perf_counter()
                try:
                    r = c.post("/search", json=body)
                    ok = r.status_code == 200
                except httpx.HTTPError as e:
                    ok, r = False, e
                dt = time.perf_counter() - t
                with lock:
                    if ok:
                        lat.append(dt)
                        answers.append((q == marker, r.json()))
                    else:
                        errors.append(str(getattr(r, "text", r))[:200])

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    wt = threading.Thread(target=writer, args=(stop,)) if writer else None
    if wt:
        wt.start()
    time.sleep(seconds)
    stop.set()
    for t in threads + ([wt] if wt else []):
        t.join()
    wall = time.perf_counter() - t0
    mixed, gens = 0, set()
    for is_marker, a in answers:
        g = a["generation"]
        gens.add(g)
        live = live_at.get(g)
        if live is None:
            continue
        ids = {h["id"] for h in a["hits"]}
        if not ids <= live["all"] or (is_marker and ids != live["markers"]):
            mixed += 1
    lat_ms = np.array(lat) * 1e3
    return {"requests": len(lat), "errors": len(errors), "error_examples": errors[:3], "seconds": round(wall, 1),
            "rps": round(len(lat) / wall, 2), "p50_ms": round(float(np.percentile(lat_ms, 50)), 1) if len(lat) else None,
            "p99_ms": round(float(np.percentile(lat_ms, 99)), 1) if len(lat) else None,
            "generations_seen": sorted(gens), "answers_mixing_generations": mixed}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--beir", default=str(ROOT.parent / "shared/data/qmsum-train"))
    ap.add_argument("--index", default="/tmp/ldr-bench/qmsum-index")
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--commit-every", type=float, default=5)
    ap.add_argument("--out", default=str(ROOT / "bench/results/serve.json"))
    args = ap.parse_args()
    beir = Path(args.beir)
    src = Path(args.index)
    ensure_index(src, beir / "corpus.jsonl")
    # the benchmark writes to a copy: the source index stays as built
    work = src.parent / (src.name + "-serve")
    subprocess.run(["rm", "-rf", str(work)], check=True)
    subprocess.run(["cp", "-a", str(src), str(work)], check=True)
    queries = [json.loads(line)["text"] for line in open(beir / "queries.jsonl", encoding="utf-8")]
    import ldr
    ix = ldr.open(work)
    base = set(ix.docstore.live_ids())
    live_at = {ix.generation: {"all": set(base), "markers": set()}}
    ix.close()
    marker = "zzbenchmarker"
    proc, url = start_server(work)
    out = {"clients": args.clients, "index": str(src), "documents": len(base), "cpu_count": os.cpu_count()}
    try:
        out["read_only_load"] = load(url, queries, args.seconds, args.clients, live_at, marker)
        print(json.dumps(out["read_only_load"]), file=sys.stderr)
        added, commit_s = [], []

        def writer(stop):
            n = 0
            with httpx.Client(base_url=url, timeout=300, headers={"X-API-Key": KEY}) as c:
                while not stop.is_set():
                    t = time.perf_counter()
                    doc = {"id": f"bench-new-{n}", "title": f"added {n}",
                           "text": f"{marker} meeting notes number {n}. " + " ".join(random.Random(n).sample(queries, 3))}
                    r = c.post("/documents", json={"documents": [doc]})
                    if r.status_code == 200:
                        added.append(doc["id"])
                        g = r.json()["generation"]
                        live_at[g] = {"all": base | set(added), "markers": set(added)}
                        commit_s.append(time.perf_counter() - t)
                    n += 1
                    stop.wait(max(0.0, args.commit_every - (time.perf_counter() - t)))

        out["load_with_commits"] = load(url, queries, args.seconds, args.clients, live_at, marker, writer)
        out["load_with_commits"].update(commits=len(commit_s), commit_p50_s=round(float(np.median(commit_s)), 2)
                                        if commit_s else None)
        print(json.dumps(out["load_with_commits"]), file=sys.stderr)
    finally:
        proc.terminate()
        proc.wait(30)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
