"""What a cross-encoder's rerank asks of the shards (issue 55): every Shard call of a sharded
index's searches, arguments and answers pickled and counted per call kind, with the packaged
cross-encoder; the top 10 ids and scores are printed to compare two versions of ldr.

    ldr reshard -i QMSUM_INDEX -o qmsum-4 --shards 4
    PYTHONPATH=SRC python bench/sweeps/bench_rerank_wire.py qmsum-4 --data ../shared/data/qmsum-train --out hits.json
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # bench/: bench_coordinator
from bench_coordinator import Counting  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("index")
    ap.add_argument("--data", required=True)
    ap.add_argument("--queries", type=int, default=20)
    ap.add_argument("--model", default="ms-marco-minilm-l12")
    ap.add_argument("--depth", type=int, default=30)
    ap.add_argument("--windows", type=int, default=2)
    ap.add_argument("--out", default=None, help="the hits (JSON), to compare two runs")
    a = ap.parse_args()
    import ldr
    from ldr.eval.beir import load_queries

    qs = list(dict(sorted(load_queries(Path(a.data)).items())).values())[:a.queries]
    ix = ldr.open(a.index)
    tally: dict = {}
    snap = ix._snapshot()
    snap.shards = [Counting(s, tally) for s in snap.shards]
    hits, t = [], time.perf_counter()
    for q in qs:
        r = ix.search(q, k=10, rerank_model=a.model, rerank_depth=a.depth, rerank_windows=a.windows)
        hits.append([(h.id, round(h.score, 6)) for h in r])
    print(json.dumps({"reranker": r.reranker, "bytes_per_query": {k: round(v / len(qs)) for k, v in tally.items()},
                      "total_kb": round(sum(tally.values()) / len(qs) / 1024, 1),
                      "seconds": round(time.perf_counter() - t, 1)}))
    if a.out:
        Path(a.out).write_text(json.dumps(hits))


if __name__ == "__main__":
    sys.exit(main())
