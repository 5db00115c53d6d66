"""The query encoders' share of a warm default search (issue 80), paired in one process: each
query searched twice, with the sparse query weighed over the terms the index's live documents hold
(the default: the SPLADE projection over those columns alone) and over the whole vocabulary,
alternating which goes first; no recent-encoding cache, so every search encodes. Prints the p50 of
each, the paired median difference, each query encoder's p50, and how many of the top-10 rankings
differ between the two.

    python bench/bench_query_encoders.py --index IDX --data ../shared/data/qmsum-train [--queries 200]
"""
from __future__ import annotations

import argparse
import json
import statistics as st
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ldr  # noqa: E402
from ldr.components import recent_queries  # noqa: E402
from ldr.search.searcher import Snapshot  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index", required=True)
    ap.add_argument("--data", required=True, type=Path)
    ap.add_argument("--queries", type=int, default=200)
    a = ap.parse_args()
    queries = [json.loads(line)["text"] for line in open(a.data / "queries.jsonl", encoding="utf-8")][:a.queries]
    recent_queries.encode_many = lambda enc, qs, compute, key=None: list(compute(list(qs)))   # every search encodes
    terms, narrow = Snapshot.terms, {"on": True}
    Snapshot.terms = lambda self, kind: terms(self, kind) if narrow["on"] else None
    index = ldr.Index(a.index)
    for q in ("warm up the models", "and the caches"):
        index.search(q, k=10)
    took: dict = {True: [], False: []}
    enc: dict = {True: {}, False: {}}
    differ = 0
    for i, q in enumerate(queries):
        ranked = {}
        for on in ((True, False) if i % 2 else (False, True)):
            narrow["on"] = on
            t = time.perf_counter()
            r = index.search(q, k=10)
            took[on].append(1000 * (time.perf_counter() - t))
            ranked[on] = [h.id for h in r]
            for k, v in r.timings_ms.items():
                if k.startswith("encode."):
                    enc[on].setdefault(k, []).append(v)
        differ += ranked[True] != ranked[False]
    diff = [x - y for x, y in zip(took[True], took[False])]
    p50 = {on: {k: round(st.median(v), 1) for k, v in enc[on].items()} for on in enc}
    print(f"{len(queries)} queries on {a.index}: p50 whole vocabulary {st.median(took[False]):.1f} ms, over the "
          f"index's terms {st.median(took[True]):.1f} ms, paired median difference {st.median(diff):+.1f} ms; "
          f"encoders {p50[False]} -> {p50[True]}; top-10 rankings that differ: {differ}")


if __name__ == "__main__":
    main()
