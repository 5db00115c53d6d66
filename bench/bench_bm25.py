"""BM25 on a BEIR folder: index throughput, warm query latency and nDCG@10 per ldr backend.

    python bench/bench_bm25.py [--data ../shared/data/qmsum-train] [--backends tantivy,lucene]
"""
from __future__ import annotations

import argparse
import resource
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

import ldr
from ldr.corpus import IngestReport, iter_corpus
from ldr.eval.beir import load_qrels, load_queries
from ldr.eval.metrics import evaluate


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared/data/qmsum-train"))
    ap.add_argument("--backends", default="tantivy,lucene")
    ap.add_argument("--depth", type=int, default=1000)
    args = ap.parse_args()
    data = Path(args.data)
    corpus = data / "corpus.jsonl"
    queries, qrels = load_queries(data), load_qrels(data)
    mb = corpus.stat().st_size / 1e6
    rows = []
    for backend in args.backends.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            if backend == "lucene":  # JVM start-up is a one-off per process, not indexing cost
                from ldr.index.bm25.lucene_backend import start_jvm
                start_jvm()
            report = IngestReport()
            t0 = time.perf_counter()
            idx = ldr.Index.build(corpus, Path(tmp) / "idx", bm25=backend, report=report)
            build_s = time.perf_counter() - t0
            idx.search("warm up", k=10, with_text=False)
            lat, run = [], {}
            for qid, q in queries.items():
                t1 = time.perf_counter()
                hits = idx.search(q, k=args.depth, with_text=False)
                lat.append(time.perf_counter() - t1)
                run[qid] = {h.id: h.score for h in hits}
            m = evaluate(qrels, run, ("ndcg@10", "recall@100"))
            rows.append((backend, report.indexed, build_s, report.indexed / build_s, mb / build_s,
                         1e3 * statistics.median(lat), 1e3 * float(np.percentile(lat, 95)),
                         len(lat) / sum(lat), 100 * m["ndcg@10"], 100 * m["recall@100"]))
    print(f"data: {data} ({mb:.1f} MB, {len(queries)} queries, depth {args.depth}); "
          f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    print("| backend | docs | build s | docs/s | MB/s | p50 ms | p95 ms | q/s | nDCG@10 | R@100 |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]:.2f} | {r[3]:.0f} | {r[4]:.1f} | {r[5]:.2f} | {r[6]:.2f} | {r[7]:.0f} | "
              f"{r[8]:.1f} | {r[9]:.1f} |")


if __name__ == "__main__":
    main()
