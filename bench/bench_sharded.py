"""A sharded index answers as the index a user has (issue 55): the default `ldr index` of a BEIR
folder, resharded into 1, 2 and 4 shards (`ldr.reshard`: nothing re-encoded), gives the same
top-10 ids and scores (1e-4) for every query, in every mode, with and without filters (a field only
the documents added later have; ids all in one shard, so the other shards pass nothing), before and
after the same add / replace / delete / merge on both. Also warm ms per query, sharded against
unsharded, in the same run.

    python bench/bench_sharded.py --data ../shared/data/qmsum-train --work /tmp/ldr-shards
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import ldr  # noqa: E402
from ldr.eval.beir import load_qrels, load_queries  # noqa: E402
from ldr.eval.metrics import evaluate  # noqa: E402
from ldr.index.cluster import shard_of  # noqa: E402


def compare(one, sharded, queries: dict, qrels: dict, filters: dict | None) -> dict:
    out = {}
    kinds = one.manifest["components"]
    for mode in (None,) + tuple(k for k in ("bm25", "dense", "sparse", "colbert") if k in kinds):
        kw = {"mode": mode} if mode else {}
        if filters:
            kw["filters"] = filters
        runs, same, worst, secs = {"one": {}, "sharded": {}}, 0, 0.0, {"one": [], "sharded": []}
        rel = 0.0       # the calibrated relevance too (the query fit reads the index's summed BM25 distribution)
        for q, text in queries.items():
            for name, ix in (("one", one), ("sharded", sharded)):
                t = time.perf_counter()
                runs[name][q] = ix.search(text, k=10, passages=0, **kw)
                secs[name].append(time.perf_counter() - t)
            a, b = runs["one"][q], runs["sharded"][q]
            same += [h.id for h in a] == [h.id for h in b]
            worst = max([worst] + [abs(x.score - y.score) for x, y in zip(a, b)])
            rel = max([rel] + [abs((x.relevance or 0.0) - (y.relevance or 0.0)) for x, y in zip(a, b)])
        qs = [q for q in queries if q in qrels]
        out[mode or "default"] = {
            "same_top10_ids": f"{same}/{len(queries)}", "max_score_diff": worst, "max_relevance_diff": rel,
            "ndcg10": {n: round(100 * evaluate({q: qrels[q] for q in qs}, {q: {h.id: h.score for h in r[q]} for q in qs},
                                               ("ndcg@10",))["ndcg@10"], 2) for n, r in runs.items()} if qs else None,
            "median_ms": {n: round(1e3 * statistics.median(v), 1) for n, v in secs.items()}}
        print(mode or "default", json.dumps(out[mode or "default"]), file=sys.stderr, flush=True)
    return out


def writes(ix, corpus_ids: list[str]) -> None:
    """The same sequence on either index: 3 documents with a field no other document has, one
    replaced, three deleted, then a merge."""
    ix.add([ldr.Doc(f"note-{i}", f"A short note {i} on the meeting's budget, the remote control and the marketing "
                    f"plan. Note {i}.", f"Note {i}", {"kind": "note"}) for i in range(3)])
    first = ix.document(corpus_ids[0])
    ix.add([ldr.Doc(first.id, first.text[: len(first.text) // 2], first.title, first.meta)])
    ix.delete(corpus_ids[1:4])
    ix.merge()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--shards", default="1,2,4")
    ap.add_argument("--work", default="/tmp/ldr-shards")
    ap.add_argument("--max-queries", type=int, default=None)
    ap.add_argument("--filter-queries", type=int, default=200, help="queries of the filtered comparisons")
    ap.add_argument("--out", default=None, help="write the report (JSON) here too")
    a = ap.parse_args()
    data, work = Path(a.data), Path(a.work)
    queries, qrels = load_queries(data), load_qrels(data, "test")
    queries = {q: queries[q] for q in list(queries)[:a.max_queries]}
    base = work / "default"
    t = time.perf_counter()
    if not base.is_dir():
        ldr.Index.build(data / "corpus.jsonl", base, progress=False)    # `ldr index corpus -o idx`: defaults
    report = {"data": str(data), "queries": len(queries), "build_s": round(time.perf_counter() - t, 1), "shards": {}}
    for n in [int(x) for x in a.shards.split(",")]:
        one_path, sh_path = work / f"one-{n}", work / f"s{n}"
        for p in (one_path, sh_path):
            shutil.rmtree(p, ignore_errors=True)
        shutil.copytree(base, one_path)
        one = ldr.open(one_path)
        t = time.perf_counter()
        sharded = ldr.reshard(one, sh_path, n)
        ids = list(one.docstore.ids)
        holder = shard_of(ids[0], n)
        in_one = [i for i in ids if shard_of(i, n) == holder][:20]
        r = {"docs": [s["live"] for s in sharded.cluster["shards"]], "reshard_s": round(time.perf_counter() - t, 1)}
        print(f"{n} shards", r, file=sys.stderr, flush=True)
        r["built"] = compare(one, sharded, queries, qrels, None)
        some = dict(list(queries.items())[:a.filter_queries])
        r["built, ids of one shard"] = compare(one, sharded, some, {}, {"id": in_one})
        for ix in (one, sharded):
            writes(ix, ids)
        r["after writes"] = compare(one, sharded, queries, qrels, None)
        r["after writes, a field 3 documents have"] = compare(one, sharded, some, {}, {"kind": "note"})
        report["shards"][n] = r
    text = json.dumps(report, indent=1)
    print(text)
    if a.out:
        Path(a.out).write_text(text)


if __name__ == "__main__":
    main()
