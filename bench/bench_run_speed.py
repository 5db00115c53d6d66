"""Writing a BM25 run (issue 80): queries/s of a BM25-only ldr index's `search_many` as `ldr search
--queries --mode bm25` calls it (BM25 alone, no passages, no relevance: each query's hits built as a
user gets them), against the same with the relevance estimated, and bm25s 0.3 on the same texts,
top 10 and top 1,000, in one run, the queries new to each system (a first pass, ldr's each over a
freshly opened index), in `--repeat` rounds that time every system once each (the machine's
speed drifts: each round's ratio is paired, and the medians are shown):
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
    ap.add_argument("--repeat", type=int, default=7, help="rounds, each timing every system once (medians shown)")
    args = ap.parse_args()
    d = Path(args.data)
    docs = [json.loads(line) for line in open(d / "corpus.jsonl", encoding="utf-8")]
    qrels = read_qrels(next((d / "qrels").glob("*.tsv")))
    queries = [(q["_id"], q["text"]) for q in map(json.loads, open(d / "queries.jsonl", encoding="utf-8"))
               if q["_id"] in qrels][:args.queries]
    qrels = {q: qrels[q] for q, _ in queries}
    ndcg = lambda run: 100 * evaluate(qrels, run, ("ndcg@10",))["ndcg@10"]   # noqa: E731
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp) / "idx"
        ix = ldr.Index.build(({"id": x["_id"], "title": x.get("title", ""), "text": x["text"]} for x in docs),
                             where, dense=None, sparse=None, progress=False)
        systems = {"ldr --mode bm25 run": lambda k: _ldr_pass(where, queries, k)}
        try:
            systems.update(_bm25s_systems(docs, queries, ix.retriever("bm25")))
        except ImportError:
            print("bm25s is not installed (pip install -e '.[bench]')")
        for k in (10, 1000):
            # each round times every system once, one after the other: the machine's speed drifts by
            # up to 2x within minutes, so each round's ratio is a paired one, and the medians are shown
            times: dict = {name: [] for name in systems}
            runs = {}
            for r in range(args.repeat):
                # a pass runs slower after another system's (its allocations): the order alternates
                for name, one_pass in (list if r % 2 else reversed)(list(systems.items())):
                    secs, runs[name] = one_pass(k)
                    times[name].append(secs)
            for name in systems:
                ratio = "" if name == "ldr --mode bm25 run" else "  ldr/this, paired: " + _spread(
                    [b / a for a, b in zip(times["ldr --mode bm25 run"], times[name])])
                print(f"k={k:<5} {name:<26} {len(queries) / statistics.median(times[name]):8.1f} q/s  "
                      f"nDCG@10 {ndcg(runs[name]):.2f}{ratio}")
            secs, run = _ldr_pass(where, queries, k, relevance=True)
            print(f"k={k:<5} {'ldr --mode bm25, relevance':<26} {len(queries) / secs:8.1f} q/s  nDCG@10 {ndcg(run):.2f}")


def _spread(ratios: list) -> str:
    q = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios * 3
    return f"median {statistics.median(ratios):.2f}x (quartiles {q[0]:.2f}-{q[2]:.2f}x)"


def _ldr_pass(where: Path, queries: list, k: int, relevance: bool = False) -> tuple[float, dict]:
    """One pass of ldr's run over a freshly opened index (the queries' terms are new to it)."""
    ix = ldr.Index(where)
    # what a run loads (scipy's sparse product for its batches) loaded, no query term seen
    list(ix.search_many([("a", "warm"), ("b", "up")], k=10, mode="bm25", passages=0, relevance=False))
    t = time.perf_counter()
    run = {qid: {h.id: h.score for h in hits}
           for qid, hits in ix.search_many(queries, k=k, mode="bm25", passages=0, with_meta=False,
                                           **({} if relevance else {"relevance": False}))}
    return time.perf_counter() - t, run


def _bm25s_systems(docs: list, queries: list, own) -> dict:
    """bm25s as its README runs it, and given ldr's own terms (`own`: ldr's BM25 retriever)."""
    import bm25s
    import Stemmer

    stem = Stemmer.Stemmer("english")
    texts = [f"{x.get('title', '')}\n{x['text']}" for x in docs]
    terms = lambda x: own._an.analyze(cjk_pretokenize(x) if own._cjk else x)   # noqa: E731
    out = {}
    for label, tok, qtok in (
            ("bm25s", *[lambda t: bm25s.tokenize(t, stopwords="en", stemmer=stem, show_progress=False)] * 2),
            ("bm25s on ldr's terms", lambda t: [terms(x) for x in t],
             lambda t: [list(own._terms(x).elements()) for x in t])):
        retriever = bm25s.BM25()
        retriever.index(tok(texts), show_progress=False)

        def one_pass(k, retriever=retriever, qtok=qtok):
            t = time.perf_counter()
            ids, scores = retriever.retrieve(qtok([q for _, q in queries]), k=min(k, len(docs)),
                                             show_progress=False, n_threads=1)
            run = {qid: {docs[j]["_id"]: float(s) for j, s in zip(ids[i], scores[i]) if s > 0}
                   for i, (qid, _) in enumerate(queries)}
            return time.perf_counter() - t, run
        out[label] = one_pass
    return out


if __name__ == "__main__":
    main()
