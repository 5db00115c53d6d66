"""Try ldr the way a careless user, a hostile input and a crash would (issue: hardening).

Every attack runs the real `ldr` CLI in a scratch directory and checks the outcome: nothing of
the user's is deleted, nothing outside the index is read, no code runs from an index, no
traceback, every bad input a clear error or a counted skip. Prints one line per attack and exits
non-zero if any fails.

    python bench/attack.py [--keep DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BM25 = ["--dense", "none", "--sparse", "none"]
RESULTS: list[tuple[str, bool, str]] = []


def ldr(*args, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ldr.cli", *map(lambda a: a if isinstance(a, bytes) else str(a), args)],
                          capture_output=True, timeout=timeout)


def record(name: str, ok: bool, note: str) -> None:
    RESULTS.append((name, ok, note))
    print(f"{'PASS' if ok else 'FAIL'}  {name:<44} {note}", flush=True)


def clean(r) -> bool:
    return b"Traceback" not in r.stderr and b"Traceback" not in r.stdout


def resign(idx: Path, edit) -> None:
    from ldr.index.manifest import _self_checksum
    path = sorted(idx.glob("manifest-*.json"))[-1]      # the newest generation
    m = json.loads(path.read_text())
    edit(m)
    m["checksum"] = _self_checksum(m)
    path.write_text(json.dumps(m))


def tree(folder: Path) -> dict:
    """Every entry under `folder` with its content: what an attack on it must not change."""
    out = {}
    for d, dirs, files in os.walk(folder):
        for n in dirs + files:
            q = Path(d, n)
            out[q.relative_to(folder).as_posix()] = (os.readlink(q) if q.is_symlink() else
                                                     None if q.is_dir() else q.read_bytes())
    return out


def flip(path: Path) -> None:
    """One flipped byte, written beside and renamed over (a file tantivy maps is never truncated)."""
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.with_name(path.name + ".tmp").write_bytes(bytes(data))
    os.replace(path.with_name(path.name + ".tmp"), path)


def hits(idx, query="lamp", *args) -> list:
    r = ldr("search", query, "-i", idx, "-k", "10", "--json", *args)
    return [(h["id"], round(h["score"], 6)) for h in json.loads(r.stdout)["hits"]] if r.returncode == 0 else None


def run_round3(tmp: Path, corpus: Path, idx: Path) -> None:
    """Issue 27, items 1-11: the reproductions of reliability round 3."""
    # 1. a folder that is not an index is never changed
    mine = tmp / "mine"
    (mine / "segments").mkdir(parents=True)
    (mine / "segments" / "notes.txt").write_text("my notes")
    (mine / "bm25-generations").mkdir()
    (mine / "bm25-generations" / "plan.md").write_text("my plan")
    (mine / "write.lock").write_text("my lock file")
    before = tree(mine)
    codes = [ldr(*a).returncode for a in (("add", corpus, "-i", mine), ("delete", "d1.txt", "-i", mine),
                                          ("merge", "-i", mine), ("index", corpus, "-o", mine, "-q", *BM25))]
    record("1 add/delete/merge/index on a user folder", tree(mine) == before and all(c == 2 for c in codes),
           f"exit codes {codes}, nothing changed" if tree(mine) == before else "FILES CHANGED")
    r = ldr("add", corpus, "-i", tmp / "nowhere")
    record("1 a missing -i path", r.returncode == 2 and not (tmp / "nowhere").exists(), "not created")

    # 2. symlinks in place of the lock and the reader markers
    victim = tmp / "victim.txt"
    victim.write_text("precious")
    lk = tmp / "idx-lock"
    shutil.copytree(idx, lk)
    (lk / "write.lock").unlink()
    (lk / "write.lock").symlink_to(victim)
    r = ldr("delete", "d1.txt", "-i", lk)
    record("2 write.lock is a symlink to a user file", victim.read_text() == "precious" and clean(r),
           f"exit {r.returncode}, target untouched")
    rd = tmp / "idx-readers"
    shutil.copytree(idx, rd)
    shutil.rmtree(rd / "readers", ignore_errors=True)
    (tmp / "outside").mkdir()
    (tmp / "outside" / "keep.txt").write_text("keep")
    (rd / "readers").symlink_to(tmp / "outside")
    r1, r2 = ldr("search", "lamp", "-i", rd), ldr("delete", "d2.txt", "-i", rd)
    record("2 readers/ is a symlink out of the index", (tmp / "outside" / "keep.txt").exists() and clean(r1) and clean(r2),
           "nothing outside deleted")

    # 3. the index as its own corpus
    own = tmp / "idx-own"
    shutil.copytree(idx, own)
    r = ldr("add", own, "-i", own)
    record("3 ldr add IDX -i IDX", r.returncode == 2 and b"inside the index" in r.stderr, r.stderr.decode().strip()[:90])

    # 4-5. a damaged tantivy file: no write re-blesses it, no search panics
    dmg = tmp / "idx-dmg"          # tantivy: no longer the default BM25 (issue 55), built for this one
    r = ldr("index", idx.parent / "corpus", "-o", dmg, "-q", "--bm25", "tantivy", "--dense", "none", "--sparse", "none")
    assert r.returncode == 0, r.stderr
    gen = sorted((dmg / "bm25-generations").iterdir())[-1]
    flip(max((f for f in gen.iterdir() if f.suffix in (".idx", ".term", ".pos", ".store")), key=lambda f: f.stat().st_size))
    add = tmp / "more"
    add.mkdir()
    (add / "new.txt").write_text("a new document about the lamp")
    ra, rc = ldr("add", add, "-i", dmg), ldr("check", dmg, "-q")
    record("4 write on a damaged tantivy file", ra.returncode != 0 and rc.returncode == 1 and clean(ra),
           ra.stderr.decode().strip()[:90])
    bad = [ldr("search", q, "-i", dmg) for q in ("lamp", "topic1", "keeper 7")]
    record("5 search on the damaged index", all(b"panicked" not in r.stderr and clean(r) for r in bad),
           (bad[0].stderr.decode().strip() or "answered")[:90])
    cp = tmp / "idx-restored"
    shutil.copytree(idx, cp)                    # new inodes: a restore from a backup
    flip(next((cp / "segments").iterdir()) / "docstore.parquet")
    r = ldr("add", add, "-i", cp)
    record("4 restored copy with a damaged segment", r.returncode != 0 and ldr("check", cp, "-q").returncode == 1,
           r.stderr.decode().strip()[:90])

    # 6. replace + delete, then merge == a fresh build of the final corpus (tantivy)
    live = tmp / "idx-live"
    shutil.copytree(idx, live)
    final = tmp / "final"
    shutil.copytree(corpus, final)
    upd = tmp / "upd"
    upd.mkdir()
    for i in range(0, 30, 3):
        text = f"document {i} rewritten about the harbour lamp and topic{(i + 1) % 4}"
        (upd / f"d{i}.txt").write_text(text)
        (final / f"d{i}.txt").write_text(text)
    ldr("add", upd, "-i", live)
    gone = [f"d{i}.txt" for i in range(1, 30, 5)]
    ldr("delete", *gone, "-i", live)
    for g in gone:
        (final / g).unlink()
    ldr("merge", "-i", live)
    ldr("index", final, "-o", tmp / "idx-fresh", "-q", *BM25)
    qs = ["lamp", "topic1", "harbour lamp keeper", "document 7", "rewritten topic3"]
    same = [hits(live, q) == hits(tmp / "idx-fresh", q) for q in qs]
    record("6 replace+delete+merge == fresh build", all(same), f"{sum(same)}/{len(qs)} top-10 lists and scores identical")

    # 7-8. the user's fields are kept as given
    recs = tmp / "recs"
    recs.mkdir()
    rows = [{"id": "a", "text": "the lamp keeper", "source": "crm", "tags": ["x", "y"], "geo": {"lat": 1.5}, "n": None},
            {"id": "b", "text": "the lamp room", "source": "wiki"}]
    (recs / "c.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rows))
    ldr("index", recs, "-o", tmp / "idx-recs", "-q", *BM25)
    r = ldr("search", "lamp", "-i", tmp / "idx-recs", "--filter", "source=crm", "--json")
    got = json.loads(r.stdout)["hits"] if r.returncode == 0 else []
    record("7 a user's own source field", [h["id"] for h in got] == ["a"] and got[0]["meta"]["source"] == "crm",
           f"filter source=crm -> {[h['id'] for h in got]}; ldr's own under \"ldr\"")
    meta = got[0]["meta"] if got else {}
    record("8 nested, list and null metadata", meta.get("tags") == ["x", "y"] and meta.get("geo") == {"lat": 1.5}
           and "n" in meta, "kept as given")

    # 9-10. the server: non-finite numbers, lone surrogates, booleans as numbers
    try:
        import httpx
    except ImportError:
        record("9-10 server", True, "skipped: pip install 'ldr[server]'")
    else:
        with socket.socket() as sk:
            sk.bind(("127.0.0.1", 0))
            port = sk.getsockname()[1]
        srv = subprocess.Popen([sys.executable, "-m", "ldr.cli", "serve", "-i", str(tmp / "idx-recs"), "--port", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            url = f"http://127.0.0.1:{port}"
            for _ in range(120):
                try:
                    if httpx.get(url + "/health", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.5)
            hdr = {"content-type": "application/json"}
            r9 = httpx.post(url + "/documents", content='{"documents": [{"id": "c", "text": "lamp", "depth": NaN}]}',
                            headers=hdr, timeout=30)
            s9 = httpx.post(url + "/search", json={"query": "lamp"}, timeout=30)
            record("9 NaN metadata POSTed", r9.status_code == 400 and s9.status_code == 200 and "NaN" not in s9.text,
                   f"{r9.status_code}: {r9.json().get('error', '')[:60]}")
            r10 = httpx.post(url + "/search", content='{"query": "la\\ud800mp lamp"}', headers=hdr, timeout=30)
            k10 = httpx.post(url + "/search", content='{"query": "lamp", "k": true}', headers=hdr, timeout=30)
            record("10 lone surrogate / k: true", r10.status_code == 200 and k10.status_code == 422,
                   f"{r10.status_code} (U+FFFD), k: true -> {k10.status_code}")
        finally:
            srv.terminate()
            srv.wait(30)

    # 11. a read-only index (a read-only bind mount in a user namespace)
    script = (f"mount --bind {idx} {idx} && mount -o remount,ro,bind {idx} || exit 90\n"
              f"{sys.executable} -m ldr.cli search lamp -i {idx} -k 2 --json")
    r = subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, timeout=120) \
        if shutil.which("unshare") else None
    if r is None or r.returncode == 90:
        record("11 read-only index", True, "skipped: no read-only bind mount here")
    else:
        record("11 read-only index", r.returncode == 0 and len(json.loads(r.stdout)["hits"]) == 2, "searched")


def run(tmp: Path) -> None:
    corpus = tmp / "corpus"
    corpus.mkdir()
    for i in range(30):
        (corpus / f"d{i}.txt").write_text(f"document {i} about topic{i % 4} and the lamp keeper {i}")
    idx = tmp / "idx"
    r = ldr("index", corpus, "-o", idx, "-q", *BM25)
    assert r.returncode == 0, r.stderr

    run_round3(tmp, corpus, idx)
    from attack_round4 import run_round4
    run_round4(tmp, corpus, idx, ldr, record, clean, resign)
    from attack_round5 import run_round5
    run_round5(tmp, corpus, idx, ldr, record, clean)

    # 1. user files
    web = tmp / "webapp"
    web.mkdir()
    (web / "manifest.json").write_text('{"name": "app"}')
    (web / "app.js").write_text("precious")
    r = ldr("index", corpus, "-o", web, "-q", *BM25)
    record("1 foreign manifest.json", r.returncode == 2 and (web / "app.js").exists() and clean(r),
           r.stderr.decode().strip()[:90])
    shutil.copytree(idx, tmp / "idx-foreign")
    (tmp / "idx-foreign" / "mine.txt").write_text("x")
    r = ldr("index", corpus, "-o", tmp / "idx-foreign", "-q", "--overwrite", *BM25)
    record("1 foreign file inside an index", r.returncode == 2 and (tmp / "idx-foreign" / "mine.txt").exists(),
           "refused, names mine.txt" if b"mine.txt" in r.stderr else r.stderr.decode()[:90])
    ok = all(ldr("index", corpus, "-o", corpus / "idx", "-q", "--overwrite", *BM25).returncode == 0 for _ in range(2))
    record("1 output inside the corpus, built twice", ok, "not ingested")
    shutil.rmtree(corpus / "idx")

    # 2. code from an index
    evil = tmp / "idx-evil"
    shutil.copytree(idx, evil)
    resign(evil, lambda m: m["components"].update(dense={
        "path": "dense", "faiss": {"index": "flat"}, "vectors": 0, "dim": 8,
        "model": {"name": str(tmp / "evil-model"), "settings": {"model": str(tmp / "evil-model"), "trust_remote_code": True}}}))
    r = ldr("search", "lamp", "-i", evil, "--mode", "dense")
    record("2 trust_remote_code in a manifest", r.returncode == 2 and b"--trust-remote-code" in r.stderr and clean(r),
           r.stderr.decode().strip()[:90])

    # 3. paths out of the index
    for label, edit in (("components path ../elsewhere", lambda m: m["components"]["bm25"].update(path="../elsewhere")),
                        ("absolute file path /etc/passwd", lambda m: m["files"].update(
                            {"/etc/passwd": {"size": 1, "sha256": "0" * 64}})),
                        ("missing key", lambda m: m["components"]["bm25"].pop("analyzer"))):
        bad = tmp / f"idx-{abs(hash(label))}"
        shutil.copytree(idx, bad)
        resign(bad, edit)
        r = ldr("info", bad)
        record(f"3 {label}", r.returncode == 2 and clean(r), r.stderr.decode().strip()[:90])

    # 4. corrupted files (tantivy is no longer the default BM25: an index of its own for its file)
    tantivy = tmp / "idx-tantivy"
    ldr("index", tmp / "corpus", "-o", tantivy, "-q", "--bm25", "tantivy", "--dense", "none", "--sparse", "none")
    for label, target, src in (("docstore", "segments/seg-000001/docstore.parquet", idx),
                               ("tantivy meta", "bm25-generations/gen-000001/meta.json", tantivy)):
        bad = tmp / f"idx-c-{target.replace('/', '-')}"
        shutil.copytree(src, bad)
        data = bytearray((bad / target).read_bytes())
        data[len(data) // 2] ^= 0xFF
        (bad / target).write_bytes(bytes(data))
        r1, r2 = ldr("search", "lamp", "-i", bad), ldr("check", bad, "-q")
        record(f"4 flipped byte in {label}", r1.returncode == 2 and r2.returncode == 1 and clean(r1) and clean(r2),
               r1.stderr.decode().strip()[:90])
    r = ldr("check", idx, "-q")
    record("4 ldr check on a sound index", r.returncode == 0, r.stdout.decode().strip()[:90])

    # bad input
    bad_corpus = tmp / "bad"
    bad_corpus.mkdir()
    (bad_corpus / "ok.txt").write_text("fine document about herons")
    os.mkfifo(bad_corpus / "fifo.txt")
    os.symlink("/dev/zero", bad_corpus / "zero.txt")
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(bad_corpus / "sock.txt"))
    (bad_corpus / "surrogate.jsonl").write_text('{"id": "s", "text": "lone \\ud800 surrogate"}\n{"text": "no id"}\n')
    (bad_corpus / "u16.txt").write_bytes("utf-16 text about grebes".encode("utf-16"))
    (bad_corpus / "e.html").write_text("<p>Tom &amp;amp; Jerry</p>")
    (bad_corpus / "big.txt").write_text("word " * 300_000)
    t = time.perf_counter()
    r = ldr("index", bad_corpus, "-o", tmp / "idx-bad", "-q", *BM25, "--max-doc-mb", "1", timeout=60)
    s.close()
    out = r.stdout.decode()
    record("FIFO / socket / link to /dev/zero", "not a regular file: 3" in out and time.perf_counter() - t < 60, out.strip()[:90])
    record("document over --max-doc-mb", "larger than --max-doc-mb 1: 1" in out, "skipped and counted")
    record("lone surrogate in JSONL", "lone surrogates replaced: 1" in out, "replaced and counted")
    record("JSONL record without id", "records without an id" in out, "reported with the assigned id")
    r = ldr("search", "grebes", "-i", tmp / "idx-bad", "-k", "1", "--json")
    record("UTF-16 with BOM", r.returncode == 0 and json.loads(r.stdout)["hits"][0]["id"] == "u16.txt", "decoded")
    r = ldr("search", "jerry", "-i", tmp / "idx-bad", "-k", "1", "--json", "--text")
    record("HTML entity unescaped once", "Tom &amp; Jerry" in json.loads(r.stdout)["hits"][0].get("text", ""), "&amp;amp; -> &amp;")
    r = ldr("search", b"herons \xff\xfe", "-i", tmp / "idx-bad")
    record("invalid UTF-8 in the query (argv)", r.returncode == 0 and clean(r), "answered")
    r = ldr("search", "lamp", "-i", idx, "-k", str(10**18))
    record("-k 10^18", r.returncode == 0 and clean(r), "clamped to the index size")
    for w in ("nan", "inf", "-1"):
        r = ldr("search", "lamp", "-i", idx, "--weights", f"bm25={w}")
        record(f"fusion weight {w}", r.returncode == 2 and clean(r), r.stderr.decode().strip()[:90])
    outs = {m: ldr("search", "   ", "-i", idx, "--mode", m) for m in ("bm25", "hybrid")}
    record("whitespace-only query", all(o.returncode == 2 and b"query is empty" in o.stderr for o in outs.values()),
           "same error in every mode")
    t = time.perf_counter()
    r = ldr("search", "lamp " * 25_000, "-i", idx)   # argv holds at most 128 kB per argument
    record("125k-character query (CLI, BM25)", r.returncode == 0, f"{time.perf_counter() - t:.2f}s wall (cold CLI)")
    # the full pipeline (BM25 + MiniLM + SPLADE) on the sample corpus, in-process and warm
    import ldr as lib
    sample = Path(__file__).resolve().parents[1] / "corpora" / "sample"
    index = lib.Index.build(sample, tmp / "idx-sample")
    index.search("warm up the models")
    for q in ("lamp keeper " * 90_000, "x" * 1_000_000):
        t = time.perf_counter()
        index.search(q)
        secs = time.perf_counter() - t
        record(f"{len(q) // 1000}k-character query (hybrid, API)", secs < 1.0, f"{secs:.2f}s")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--keep", default=None, help="Scratch folder to keep (default: a temporary one).")
    args = ap.parse_args()
    if args.keep:
        Path(args.keep).mkdir(parents=True, exist_ok=True)
        run(Path(args.keep))
    else:
        with tempfile.TemporaryDirectory() as tmp:
            run(Path(tmp))
    failed = [n for n, ok, _ in RESULTS if not ok]
    print(f"\n{len(RESULTS) - len(failed)}/{len(RESULTS)} attacks handled" + (f"; FAILED: {failed}" if failed else ""))
    print("disk full and SIGTERM need a small filesystem and a live build: tests/test_bad_input.py covers them")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
