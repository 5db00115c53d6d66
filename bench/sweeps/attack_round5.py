"""Reliability round 5 (issue 57), run by bench/attack.py through the real CLI and a real server:
the sharded index's storage, the server's front door, metadata types, stage settings."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

BM25 = ["--dense", "none", "--sparse", "none"]


def run_round5(tmp: Path, corpus: Path, idx: Path, ldr, record, clean) -> None:
    s, u = tmp / "r5-s", tmp / "r5-u"
    ldr("index", corpus, "-o", s, "--shards", "3", "-q", *BM25)
    ldr("index", corpus, "-o", u, "-q", *BM25)
    # 1. reshard onto an existing index
    r = ldr("reshard", "-i", s, "-o", u, "--shards", "2")
    record("5.1 reshard onto an existing index", r.returncode == 2 and b"not empty" in r.stderr
           and ldr("search", "lamp", "-i", u).returncode == 0, "refused; the index answers")
    # 3. check beside a writer: tests/test_check_beside_a_writer.py (sharded) runs it live
    # 4. a shard swapped for another index's shard at the same generation
    t = tmp / "r5-t"
    more = tmp / "r5-more"
    more.mkdir()
    (more / "x.txt").write_text("a note on the lamp")
    ldr("index", corpus, "-o", t, "--shards", "3", "-q", *BM25)
    ldr("add", more, "-i", t, "-q")
    sw = tmp / "r5-sw"
    shutil.copytree(s, sw)
    for i in range(3):
        a = json.loads(sorted((t / "shards" / f"shard-00{i}").glob("manifest-*.json"))[-1].read_text())
        b = json.loads(sorted((sw / "shards" / f"shard-00{i}").glob("manifest-*.json"))[-1].read_text())
        if a["doc_count"] != b["doc_count"]:
            shutil.rmtree(sw / "shards" / f"shard-00{i}")
            shutil.copytree(t / "shards" / f"shard-00{i}", sw / "shards" / f"shard-00{i}")
            break
    c, q = ldr("check", sw), ldr("search", "lamp", "-i", sw)
    record("5.4 a shard swapped for another index's", c.returncode == 1 and q.returncode == 2
           and b"not the one the cluster committed" in c.stdout + c.stderr, "check: exit 1; open refuses")
    # 5. writing into a shard folder
    r = ldr("add", more, "-i", s / "shards" / "shard-000")
    record("5.5 ldr add into a shard folder", r.returncode == 2 and b"is a shard of" in r.stderr
           and ldr("check", s).returncode == 0, "refused; the index checks clean")
    # 8. reshard into its own source
    r = ldr("reshard", "-i", s, "-o", s / "shards" / "shard-000" / "segments" / "x", "--shards", "2", "--wait",
            timeout=60)
    record("5.8 reshard into its own source (--wait)", r.returncode == 2 and b"inside the index" in r.stderr,
           "refused at once")
    # 9. a killed reshard runs again
    env = {**os.environ, "LDR_CRASH_AT": "reshard:before-rename"}
    k = subprocess.run([sys.executable, "-m", "ldr.cli", "reshard", "-i", str(s), "-o", str(tmp / "r5-n"), "--shards",
                        "2"], env=env, capture_output=True, timeout=300)
    again = ldr("reshard", "-i", s, "-o", tmp / "r5-n", "--shards", "2")
    record("5.9 a reshard killed, run again", k.returncode == -9 and again.returncode == 0, "clean second run")
    # 10. stage settings that are not finite: tests/test_plan.py (a stage registered in the process)
    # 12. metadata types in a folder sync
    m = tmp / "r5-meta.jsonl"
    m.write_text(json.dumps({"id": "a", "text": "lamp keeper", "urgent": 1}) + "\n")
    ldr("index", m, "-o", tmp / "r5-midx", "-q", *BM25)
    m.write_text(json.dumps({"id": "a", "text": "lamp keeper", "urgent": True}) + "\n")
    ldr("add", m, "-i", tmp / "r5-midx", "-q")
    r = ldr("search", "lamp", "-i", tmp / "r5-midx", "--filter", "urgent=true", "--json")
    record("5.12 metadata 1 -> true in a folder sync", r.returncode == 0 and
           [h["id"] for h in json.loads(r.stdout)["hits"]] == ["a"], "a change; the filter finds it")
    # 14. a missing shard
    ms = tmp / "r5-ms"
    shutil.copytree(s, ms)
    shutil.rmtree(ms / "shards" / "shard-001")
    a, c = ldr("search", "lamp", "-i", ms), ldr("check", ms)
    record("5.14 a shard folder removed", a.returncode == 2 and c.returncode == 1 and b"is missing" in a.stderr
           and b"shards/shard-001`" not in a.stderr, "named as a missing shard; check exit 1")
    # 15. the API over an existing index
    code = f"import ldr\ntry:\n    ldr.Index.build({str(corpus)!r}, {str(u)!r})\nexcept ldr.ConfigError as e:\n    print('refused')"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    record("5.15 ldr.Index.build over an index", "refused" in r.stdout, "refused; overwrite=True replaces")
    # 6. the server's front door (2, slow bodies: bench/bench_slow_bodies.py)
    import socket

    import httpx
    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        port = so.getsockname()[1]
    srv = subprocess.Popen([sys.executable, "-m", "ldr.cli", "serve", "-i", str(u), "--port", str(port)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, "LDR_API_KEY": ""})
    try:
        for _ in range(200):
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        r = httpx.post(f"http://127.0.0.1:{port}/documents", json={"documents": [{"id": "z", "text": "x"}]},
                       headers={"Host": "attacker.example", "Origin": "http://attacker.example"})
        r2 = httpx.post(f"http://127.0.0.1:{port}/documents", json={"documents": [{"id": "z", "text": "x"}]},
                        headers={"Origin": "http://attacker.example"})
        record("5.6 DNS rebinding: Host attacker.example", r.status_code == 400 and r2.status_code == 403,
               "400 (Host), 403 (cross-origin write)")
        # 7. churn: add a 5,000-word document of words of its own, search, delete it
        import random

        def rss() -> float:
            line = next(x for x in Path(f"/proc/{srv.pid}/status").read_text().splitlines() if x.startswith("VmRSS:"))
            return int(line.split()[1]) / 1024
        rng, at, url = random.Random(0), {}, f"http://127.0.0.1:{port}"
        start = rss()
        for i in range(80):
            words = " ".join(f"w{i}x{rng.randrange(10 ** 9)}" for _ in range(5000))
            httpx.post(url + "/documents", json={"documents": [{"id": "churn", "text": f"lamp {words}"}]}, timeout=60)
            httpx.post(url + "/search", json={"query": "lamp keeper", "k": 5}, timeout=60)
            httpx.post(url + "/documents/delete", json={"ids": ["churn"]}, timeout=60)
            if i + 1 in (40, 80):
                at[i + 1] = rss()
        record("5.7 memory under add/search/delete churn", at[80] - start < 100 and at[80] - at[40] < 20,
               f"+{at[40] - start:.0f} MB after 40 rounds, +{at[80] - start:.0f} MB after 80")
    finally:
        srv.terminate()
        srv.wait()
    # 11. an unwritable export cache: PyTorch, said once, nothing left in TMPDIR
    d, tmpdir = tmp / "r5-dense", tmp / "r5-tmpdir"
    tmpdir.mkdir()
    ldr("index", corpus, "-o", d, "-q", "--sparse", "none")
    blocker = tmp / "r5-blocker"
    blocker.write_text("not a folder")
    env = {**os.environ, "LDR_CACHE_DIR": str(blocker / "cache"), "TMPDIR": str(tmpdir)}
    r = subprocess.run([sys.executable, "-m", "ldr.cli", "search", "lamp keeper", "-i", str(d)], capture_output=True,
                       env=env, timeout=300)
    record("5.11 an unwritable export cache", r.returncode == 0 and r.stderr.count(b"not writable") == 1
           and not list(tmpdir.glob("ldr-onnx-*")), "PyTorch, one warning, nothing in TMPDIR")
