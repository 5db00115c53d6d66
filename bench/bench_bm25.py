"""BM25: ldr (tantivy, native and Lucene backends) vs pyserini used directly vs bm25s, on one BEIR folder,
in the same run. Each system runs in its own subprocess so that peak RSS is its own.

    python bench/bench_bm25.py [--data ../shared/data/qmsum-train] [--systems ...]

Reported: index wall time, peak RSS, queries/s (top-1000, one query at a time, warm), p50/p95
latency, nDCG@10 and R@100 (trec_eval semantics via pytrec_eval).
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SYSTEMS = ("ldr-tantivy", "ldr-native", "ldr-lucene", "pyserini", "bm25s", "bm25s-stem")


def _corpus(data: Path):
    for line in open(data / "corpus.jsonl", encoding="utf-8"):
        r = json.loads(line)
        yield r["_id"], (r.get("title", "") + "\n" + r["text"]).strip()


def run_one(system: str, data: Path, depth: int, mode: str | None = None) -> dict:
    from ldr.eval.beir import load_qrels, load_queries
    from ldr.eval.metrics import evaluate

    queries, qrels = load_queries(data), load_qrels(data)
    queries = {q: t for q, t in queries.items() if q in qrels}
    tmp = Path(tempfile.mkdtemp())
    if system == "ldr-lucene" or system == "pyserini":
        from ldr.components.bm25_store.lucene_backend import start_jvm
        start_jvm()  # JVM start-up is a one-off per process, not indexing cost
    t0 = time.perf_counter()
    if system.startswith("ldr-"):
        import ldr
        idx = ldr.Index.build(data / "corpus.jsonl", tmp / "idx", bm25=system[4:], dense=None, sparse=None)
        # the default search of a BM25-only index (window stage included), or `--mode bm25` alone
        search = lambda q: [(h.id, h.score) for h in idx.search(q, k=depth, with_text=False, passages=0,
                                                                **({"mode": mode} if mode else {}))]
    elif system == "pyserini":
        from pyserini.index.lucene import LuceneIndexer
        from pyserini.search.lucene import LuceneSearcher
        indexer = LuceneIndexer(str(tmp / "lucene"), threads=2)
        indexer.add_batch_dict([{"id": d, "contents": t} for d, t in _corpus(data)])
        indexer.close()
        searcher = LuceneSearcher(str(tmp / "lucene"))  # pyserini defaults: BM25 k1=0.9 b=0.4
        search = lambda q: [(h.docid, h.score) for h in searcher.search(q, k=depth)]
    elif system.startswith("bm25s"):
        import bm25s
        import Stemmer
        # "bm25s": its README defaults (English stop words, no stemmer), as measured in DESIGN.md
        stemmer = Stemmer.Stemmer("english") if system == "bm25s-stem" else None
        ids, texts = zip(*_corpus(data))
        retriever = bm25s.BM25()  # defaults: k1 1.5, b 0.75 (Robertson/Lucene idf)
        retriever.index(bm25s.tokenize(list(texts), stopwords="en", stemmer=stemmer, show_progress=False),
                        show_progress=False)

        def search(q):
            docs, scores = retriever.retrieve(bm25s.tokenize([q], stopwords="en", stemmer=stemmer, show_progress=False),
                                              k=min(depth, len(ids)), show_progress=False)
            return [(ids[d], float(s)) for d, s in zip(docs[0], scores[0])]
    else:
        raise SystemExit(f"unknown system {system}")
    build = time.perf_counter() - t0
    search("warm up query")
    lat, run = [], {}
    for qid, q in queries.items():
        t = time.perf_counter()
        hits = search(q)
        lat.append(time.perf_counter() - t)
        run[qid] = dict(hits)
    m = evaluate(qrels, run, ("ndcg@10", "recall@100"))
    lat.sort()
    return {"system": system, "index_s": build, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "qps": len(lat) / sum(lat), "p50_ms": 1e3 * statistics.median(lat), "p95_ms": 1e3 * lat[int(0.95 * len(lat))],
            "ndcg@10": 100 * m["ndcg@10"], "recall@100": 100 * m["recall@100"], "queries": len(lat)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=str(ROOT.parent / "shared/data/qmsum-train"))
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--depth", type=int, default=1000)
    ap.add_argument("--mode", default=None, help="ldr's search mode (default: the index's; bm25: BM25 alone)")
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    data = Path(args.data)
    if args.one:
        print(json.dumps(run_one(args.one, data, args.depth, args.mode)))
        return
    rows = []
    for system in args.systems.split(","):
        out = subprocess.run([sys.executable, __file__, "--one", system, "--data", str(data), "--depth", str(args.depth)]
                             + (["--mode", args.mode] if args.mode else []),
                             capture_output=True, text=True, check=True)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    mb = (data / "corpus.jsonl").stat().st_size / 1e6
    base = next((r for r in rows if r["system"] == "ldr-tantivy"), rows[0])
    print(f"data: {data} ({mb:.1f} MB); top-{args.depth} per query, one query at a time; ldr mode {args.mode or 'default'}")
    print("| system | index s | MB/s | peak RSS MB | q/s | p50 ms | p95 ms | nDCG@10 | R@100 | q/s vs ldr-tantivy |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['system']} | {r['index_s']:.2f} | {mb / r['index_s']:.1f} | {r['peak_rss_mb']:.0f} | {r['qps']:.0f} | "
              f"{r['p50_ms']:.2f} | {r['p95_ms']:.2f} | {r['ndcg@10']:.1f} | {r['recall@100']:.1f} | "
              f"{r['qps'] / base['qps']:.2f}x |")


if __name__ == "__main__":
    main()
