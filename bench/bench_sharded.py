"""A sharded index answers as one index: the same top-10 ids and scores for every query, and so
the same nDCG@10 (issue 41), measured on a BEIR folder (qmsum-train: all 1,256 queries), for the
default hybrid search (window stage included) and each retriever alone. Also the coordinator's
cost: warm seconds per query, sharded against unsharded, in the same run.

    python bench/bench_sharded.py --data ../shared/data/qmsum-train --shards 4 --work /tmp/ldr-shards
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import ldr  # noqa: E402
from ldr.eval.beir import load_qrels, load_queries  # noqa: E402
from ldr.eval.metrics import evaluate  # noqa: E402
from ldr.sharded import ShardedIndex  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--work", default="/tmp/ldr-shards")
    ap.add_argument("--max-queries", type=int, default=None)
    a = ap.parse_args()
    data, work = Path(a.data), Path(a.work)
    queries, qrels = load_queries(data), load_qrels(data, "test")
    qids = [q for q in queries if q in qrels][:a.max_queries]
    t = time.perf_counter()
    one = ldr.open(work / "one") if (work / "one").is_dir() else \
        ldr.Index.build(data / "corpus.jsonl", work / "one", bm25="native", progress=True)
    t_one = time.perf_counter() - t
    t = time.perf_counter()
    sh = ShardedIndex(work / f"s{a.shards}") if (work / f"s{a.shards}").is_dir() else \
        ShardedIndex.build(data / "corpus.jsonl", work / f"s{a.shards}", shards=a.shards, progress=True)
    t_sh = time.perf_counter() - t
    report = {"queries": len(qids), "shards": a.shards, "docs": [s["live"] for s in sh.cluster["shards"]],
              "build_s": {"unsharded": round(t_one, 1), "sharded": round(t_sh, 1)}}
    for mode in (None, "bm25", "dense", "sparse"):
        kw = {"mode": mode} if mode else {}
        runs, same, worst, secs = {"one": {}, "sharded": {}}, 0, 0.0, {"one": [], "sharded": []}
        for q in qids:
            for name, ix in (("one", one), ("sharded", sh)):
                t = time.perf_counter()
                hits = ix.search(queries[q], k=10, passages=0, **kw)
                secs[name].append(time.perf_counter() - t)
                runs[name][q] = hits
            a_, b_ = runs["one"][q], runs["sharded"][q]
            same += [h.id for h in a_] == [h.id for h in b_]
            worst = max([worst] + [abs(x.score - y.score) for x, y in zip(a_, b_)])
        label = mode or "hybrid (default: fused + window stage)"
        res = {"same_top10_ids": same, "max_score_diff": worst,
               "ndcg10": {n: round(100 * evaluate({q: qrels[q] for q in qids},
                                                  {q: {h.id: h.score for h in r[q]} for q in qids},
                                                  ("ndcg@10",))["ndcg@10"], 2) for n, r in runs.items()},
               "median_ms": {n: round(1e3 * statistics.median(v), 1) for n, v in secs.items()}}
        report[label] = res
        print(label, json.dumps(res), file=sys.stderr)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
