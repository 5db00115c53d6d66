"""Segment replication (`ldr replicate`): a copy of an index caught up after a small add copies only
that commit's files. Copies INDEX to a scratch source, replicates it whole, adds N documents of the
BEIR folder's corpus (again, under new ids) to the source, and replicates again; reports files,
bytes and seconds of each, and whether the copy answers as the source.

    python bench/bench_replica.py --index /tmp/ldr-shards/default --data ../shared/data/qmsum-train --add 2
"""
from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import ldr
from ldr.index.replica import catch_up


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--index", required=True, help="an index to copy as the source (left as it is)")
    ap.add_argument("--data", required=True)
    ap.add_argument("--add", type=int, default=2)
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp())
    src, dst = work / "src", work / "dst"
    shutil.copytree(a.index, src)
    t = time.perf_counter()
    full = catch_up(src, dst)
    full["s"] = round(time.perf_counter() - t, 2)
    docs = [json.loads(line) for line in open(Path(a.data) / "corpus.jsonl", encoding="utf-8")][:a.add]
    ldr.open(src).add([ldr.Doc(d["_id"] + "-copy", d["text"], d.get("title", "")) for d in docs])
    t = time.perf_counter()
    inc = catch_up(src, dst)
    inc["s"] = round(time.perf_counter() - t, 2)
    one, two = ldr.open(src), ldr.open(dst)
    queries = ["the budget of the remote control", "marketing report", "what did the group decide"]
    same = all([(h.id, h.score) for h in one.search(q)] == [(h.id, h.score) for h in two.search(q)] for q in queries)
    print(json.dumps({"full": full, f"after adding {a.add}": inc, "index_bytes": sum(
        f["size"] for f in one.manifest["files"].values()), "same_answers": same}))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
