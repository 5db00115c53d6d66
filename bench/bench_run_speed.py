"""Writing a BM25 run (issue 80): queries/s of a BM25-only ldr index's `search_many` as `ldr search
--queries --mode bm25` calls it (BM25 alone, no passages, no relevance: each query's hits built as a
user gets them), against the same with the relevance estimated, and bm25s 0.3 on the same texts,
top 10 and top 1,000, in one run, the queries new to each system (a first pass: the median of
`--repeat` passes, ldr's each over a freshly opened index):
bm25s as its README runs it (Snowball stemmer, English stop words; its regex splits Chinese only at
punctuation), and bm25s given ldr's own terms (the same tokens ldr scores: the same work). The
ids each returns agree as nDCG@10 says.

    python bench/bench_run_speed.py ../shared/data/qmsum-train [--queries 300]
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import ldr
from ldr.components.analysis import cjk_pretokenize
from ldr.eval.compare import read_qrels
from ldr.eval.metrics import evaluate


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--repeat", type=int, default=5, help="passes timed, each over a fresh open (the median is shown)")
    args = ap.parse_args()
    d = Path(args.data)
    docs = [json.loads(line) for line in open(d / "corpus.jsonl", encoding="utf-8")]
    qrels = read_qrels(next((d / "qrels").glob("*.tsv")))
    queries = [(q["_id"], q["text"]) for q in map(json.loads, open(d / "queries.jsonl", encoding="utf-8"))
               if q["_id"] in qrels][:args.queries]
    qrels = {q: qrels[q] for q, _ in queries}
    with tempfile.TemporaryDirectory() as tmp:
        ix = ldr.Index.build(({"id": x["_id"], "title": x.get("title", ""), "text": x["text"]} for x in docs),
                             Path(tmp) / "idx", dense=None, sparse=None, progress=False)
        for k in (10, 1000):
            for label, extra in (("ldr --mode bm25 run", {"relevance": False}), ("ldr --mode bm25, relevance", {})):
                passes = []
                for _ in range(args.repeat if "relevance" not in extra else 1):
                    ix = ldr.Index(Path(tmp) / "idx")       # opened afresh: the queries' terms are new to it
                    # what a run loads (scipy's sparse product for its batches) loaded, no query term seen
                    list(ix.search_many([("a", "warm"), ("b", "up")], k=10, mode="bm25", passages=0, relevance=False))
                    t = time.perf_counter()
                    run = {qid: {h.id: h.score for h in hits}
                           for qid, hits in ix.search_many(queries, k=k, mode="bm25", passages=0, with_meta=False,
                                                           **extra)}
                    passes.append(time.perf_counter() - t)
                secs = statistics.median(passes)
                print(f"k={k:<5} {label:<26} {len(queries) / secs:8.1f} q/s  nDCG@10 "
                      f"{100 * evaluate(qrels, run, ('ndcg@10',))['ndcg@10']:.2f}")
            try:
                import bm25s
                import Stemmer
            except ImportError:
                print("bm25s is not installed (pip install -e '.[bench]')")
                continue
            stem = Stemmer.Stemmer("english")
            texts = [f"{x.get('title', '')}\n{x['text']}" for x in docs]
            own = ix.retriever("bm25")          # ldr's analysis (tantivy's, CJK bigrams), as ldr scores
            terms = lambda x: own._an.analyze(cjk_pretokenize(x) if own._cjk else x)   # noqa: E731
            for label, tok, qtok in (
                    ("bm25s", *[lambda t: bm25s.tokenize(t, stopwords="en", stemmer=stem, show_progress=False)] * 2),
                    ("bm25s on ldr's terms", lambda t: [terms(x) for x in t],
                     lambda t: [list(own._terms(x).elements()) for x in t])):
                retriever = bm25s.BM25()
                retriever.index(tok(texts), show_progress=False)
                passes = []
                for _ in range(args.repeat):
                    t = time.perf_counter()
                    ids, scores = retriever.retrieve(qtok([q for _, q in queries]), k=min(k, len(docs)),
                                                     show_progress=False, n_threads=1)
                    run = {qid: {docs[j]["_id"]: float(s) for j, s in zip(ids[i], scores[i]) if s > 0}
                           for i, (qid, _) in enumerate(queries)}
                    passes.append(time.perf_counter() - t)
                secs = statistics.median(passes)
                print(f"k={k:<5} {label:<26} {len(queries) / secs:8.1f} q/s  nDCG@10 "
                      f"{100 * evaluate(qrels, run, ('ndcg@10',))['ndcg@10']:.2f}")


if __name__ == "__main__":
    main()
