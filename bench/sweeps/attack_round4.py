"""Reliability round 4 (issue 42), run by bench/attack.py through the real CLI: hostile filters,
ids TREC columns cannot hold, manifest and evaluation edges, model folders, an index overwritten."""
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

BM25 = ["--dense", "none", "--sparse", "none"]


def run_round4(tmp: Path, corpus: Path, idx: Path, ldr, record, clean, resign) -> None:
    # 1. a hostile glob filter: refused at once, never compiled
    t = time.perf_counter()
    r = ldr("search", "lamp", "-i", idx, "--filter", "path=" + "x" * 100_000 + "*")
    record("4.1 a 100 KB glob filter", r.returncode == 2 and b"at most 1024" in r.stderr,
           f"refused in {time.perf_counter() - t:.2f}s")
    # 3. ids with whitespace round-trip through a run and the evaluator
    sp = tmp / "r4-space"
    sp.mkdir()
    (sp / "my notes.txt").write_text("the lighthouse keeper relit the lamp")
    (sp / "other.txt").write_text("apples ripen in the orchard")
    ldr("index", sp, "-o", tmp / "r4-sidx", "-q", *BM25)
    (tmp / "r4-q.tsv").write_text("q 1\tlighthouse lamp\nq1\torchard apples\n")
    ldr("search", "--queries", tmp / "r4-q.tsv", "-i", tmp / "r4-sidx", "-o", tmp / "r4-run.trec", "-k", "2")
    (tmp / "r4-qrels.tsv").write_text("query-id\tcorpus-id\tscore\nq 1\tmy notes.txt\t1\nq1\tother.txt\t1\n")
    r = ldr("eval", "--qrels", tmp / "r4-qrels.tsv", "--run", tmp / "r4-run.trec", "--json")
    ok = r.returncode == 0 and abs(json.loads(r.stdout)["runs"]["r4-run.trec"]["ndcg@10"] - 1.0) < 1e-9
    record("4.3 a file named 'my notes.txt' in a TREC run", ok, "escaped, read back, nDCG@10 1.0")
    # 4. ldr check beside a writer: covered live by tests/test_check_beside_a_writer.py
    # 5. an integer too large for a float in metadata
    big = tmp / "r4-big.jsonl"
    big.write_text(json.dumps({"id": "big", "text": "lamp keeper", "n": 10 ** 400}) + "\n"
                   + json.dumps({"id": "small", "text": "lamp keeper", "n": 3}) + "\n")
    ldr("index", big, "-o", tmp / "r4-bidx", "-q", *BM25)
    r = ldr("search", "lamp", "-i", tmp / "r4-bidx", "--filter", "n>5", "--json")
    record("4.5 n: 10^400 in metadata, filtered", r.returncode == 0 and [h["id"] for h in json.loads(r.stdout)["hits"]]
           == ["big"], "compared exactly")
    # 6. manifest edges
    for name, edit, want in (("next_uid missing", lambda m: m.pop("next_uid"), b"next_uid"),
                             ("history not a list", lambda m: m.update(history=7), b"history"),
                             ("a segment listed twice", lambda m: m["segments"].append(dict(m["segments"][0])),
                              b"listed twice"),
                             ("next_uid set back", lambda m: m.update(next_uid=1), b"next_uid")):
        bad = tmp / f"r4-m-{name.replace(' ', '-')}"
        shutil.copytree(idx, bad)
        resign(bad, edit)
        a, c = ldr("add", corpus, "-i", bad), ldr("check", bad)
        record(f"4.6 {name}", a.returncode == 2 and want in a.stderr and c.returncode == 1 and clean(a) and clean(c),
               "add refused, check says so")
    stray = tmp / "r4-stray"
    shutil.copytree(idx, stray)
    newest = sorted(stray.glob("manifest-*.json"))[-1]
    (stray / "manifest-0000010.json").write_text(newest.read_text())
    r = ldr("search", "lamp", "-i", stray)
    record("4.6 a stray manifest-0000010.json", r.returncode == 0, "ignored")
    # 7. evaluation edges
    (tmp / "r4-qrels.txt").write_text("q1 0 d1 1.0\nq1 0 d1 0\n")
    (tmp / "r4-nan.trec").write_text("q1 Q0 d1 1 nan t\n")
    r1 = ldr("eval", "--qrels", tmp / "r4-qrels.txt", "--run", tmp / "r4-run.trec")
    (tmp / "r4-qrels.txt").write_text("q1 0 d1 1.0\n")
    r2 = ldr("eval", "--qrels", tmp / "r4-qrels.txt", "--run", tmp / "r4-nan.trec")
    record("4.7 a pair judged twice / a NaN score", r1.returncode == 2 and r2.returncode == 2
           and b"again" in r1.stderr and b"finite" in r2.stderr, "clear errors naming the line")
    # 8. a user's malformed model folder
    from ldr.encode.models import packaged_path
    src = packaged_path("all-minilm-l6-v2")
    if src is not None:
        m = tmp / "r4-model"
        shutil.copytree(src, m)
        (m / "tokenizer.json").write_text('{"version": "1.0", "model": {')
        r = ldr("index", sp, "-o", tmp / "r4-midx", "-q", "--dense", m, "--sparse", "none", "--backend", "torch")
        record("4.8 a malformed tokenizer.json", r.returncode == 2 and b"please report" not in r.stderr
               and b"cannot be loaded" in r.stderr, r.stderr.decode().strip()[:90])
    # 9. ldr index onto an existing index
    r = ldr("index", corpus, "-o", idx, "-q", *BM25)
    record("4.9 ldr index onto an index", r.returncode == 2 and b"ldr add" in r.stderr, "refused, names ldr add")
