"""Accent folding in English BM25 (issue 76): BM25-only indexes of a BEIR folder built with and
without folding, nDCG@10 per query of each, the queries that moved and a paired t-test.

    python bench/bench_fold.py ../shared/data/qmsum-train ../shared/data/legal-case-reports-dev
"""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import numpy as np
from scipy.stats import ttest_rel

import ldr
from ldr.eval.compare import read_qrels
from ldr.eval.metrics import evaluate_per_query


def one(folder: Path) -> str:
    docs = [json.loads(line) for line in open(folder / "corpus.jsonl", encoding="utf-8")]
    qrels = read_qrels(next((folder / "qrels").glob("*.tsv")))
    queries = {q["_id"]: q["text"] for q in map(json.loads, open(folder / "queries.jsonl", encoding="utf-8"))
               if q["_id"] in qrels}
    res = {}
    with tempfile.TemporaryDirectory() as tmp:
        for fold in (False, True):
            ix = ldr.Index.build(({"id": x["_id"], "title": x.get("title", ""), "text": x["text"]} for x in docs),
                                 Path(tmp) / str(fold), dense=None, sparse=None, fold=fold, progress=False)
            run = {qid: {h.id: h.score for h in hits}
                   for qid, hits in ix.search_many(list(queries.items()), k=100, passages=0)}
            res[fold] = evaluate_per_query(qrels, run, ("ndcg@10",))
    qs = sorted(set(res[False]) & set(res[True]))
    a = np.array([res[False][q]["ndcg@10"] for q in qs])
    b = np.array([res[True][q]["ndcg@10"] for q in qs])
    p = ttest_rel(a, b).pvalue if (a != b).any() else 1.0
    return (f"{folder.name}: {len(qs)} queries, no fold {100 * a.mean():.2f}, fold {100 * b.mean():.2f}, "
            f"{int((a != b).sum())} moved, p {p:.3g}")


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        print(one(Path(arg)))
