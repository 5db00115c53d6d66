"""The living index on a real corpus: adding 1% new documents vs a full rebuild (same run), search
latency with 50, 10 and 1 segments, merge cost, and whether the incrementally built index
answers like the fresh one (nDCG@10 per stage, identical top-10 lists).

    python bench/bench_living.py [--data ../shared/data/qmsum-train] [--segments 50] [--queries 200]

Index A is built as `ldr index` of the first chunk + (segments - 1) `add`s without automatic
merges, then gets the 1% new documents with one `add`; index B is built fresh from everything.
Default pipeline everywhere (tantivy BM25, MiniLM MaxP, SPLADE-tiny).
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_docs(folder: Path) -> list[dict]:
    docs = []
    with open(folder / "corpus.jsonl", encoding="utf-8") as fh:
        for line in fh:
            r = json.loads(line)
            docs.append({"id": r["_id"], "title": r.get("title", ""), "text": r["text"]})
    return docs


def latency(idx, queries: list[str], modes=("bm25", "dense", "sparse", "hybrid")) -> dict:
    out = {}
    for mode in modes:
        idx.search(queries[0], k=10, mode=mode)          # models loaded, caches warm
        times = []
        for q in queries:
            t = time.perf_counter()
            idx.search(q, k=10, mode=mode, with_text=False)
            times.append(time.perf_counter() - t)
        times.sort()
        out[mode] = {"median_ms": 1e3 * statistics.median(times), "p95_ms": 1e3 * times[int(0.95 * (len(times) - 1))]}
    return out


def runs(idx, queries: dict[str, str], mode: str) -> dict:
    return {qid: {h.id: h.score for h in idx.search(q, k=100, mode=mode, with_text=False)} for qid, q in queries.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=str(ROOT.parent / "shared/data/qmsum-train"))
    ap.add_argument("--segments", type=int, default=50)
    ap.add_argument("--new", type=float, default=0.01, help="fraction of the corpus added at the end")
    ap.add_argument("--queries", type=int, default=200, help="queries for latency and equivalence")
    ap.add_argument("--max-docs", type=int, default=None, help="first N documents only (a quick try)")
    ap.add_argument("--out", default=str(ROOT / "bench/results/living.json"))
    args = ap.parse_args()

    import ldr
    from ldr.eval.beir import load_qrels, load_queries
    from ldr.eval.metrics import evaluate

    folder = Path(args.data)
    docs = load_docs(folder)[:args.max_docs]
    n_new = max(1, round(args.new * len(docs)))
    base, new = docs[:-n_new], docs[-n_new:]
    queries = dict(list(load_queries(folder).items())[:args.queries])
    qrels = {q: rel for q, rel in load_qrels(folder, "test").items() if q in queries}
    qtexts = list(queries.values())[:50]
    tmp = Path(tempfile.mkdtemp(prefix="ldr-living-"))
    res = {"documents": len(docs), "new_documents": n_new, "segments": args.segments}
    try:
        # A: the base corpus in `segments` commits
        chunks = [base[i::args.segments] for i in range(args.segments)]
        t = time.perf_counter()
        a = ldr.Index.build(chunks[0], tmp / "a")
        for c in chunks[1:]:
            a.add(c, auto_merge=False)
        res["a_build_in_commits_s"] = time.perf_counter() - t
        assert len(a.manifest["segments"]) == args.segments
        res["latency"] = {str(args.segments): latency(a, qtexts)}
        print(json.dumps(res["latency"]), flush=True)

        t = time.perf_counter()
        r = a.add(new, auto_merge=False)
        res["add_new_s"] = time.perf_counter() - t
        res["add_new"] = {k: r[k] for k in ("added", "skipped", "generation")}
        for target in (10, 1):
            t = time.perf_counter()
            a.merge(target)
            res[f"merge_to_{target}_s"] = time.perf_counter() - t
            res["latency"][str(target)] = latency(a, qtexts)
            print(target, json.dumps(res["latency"][str(target)]), flush=True)

        # B: the same final corpus built fresh, in the same run
        t = time.perf_counter()
        b = ldr.Index.build(docs, tmp / "b")
        res["full_rebuild_s"] = time.perf_counter() - t
        res["add_vs_rebuild"] = res["add_new_s"] / res["full_rebuild_s"]

        eq = {}
        for mode in ("bm25", "dense", "sparse", "hybrid"):
            ra, rb = runs(a, queries, mode), runs(b, queries, mode)
            same = sum([*ra[q]][:10] == [*rb[q]][:10] for q in queries) / len(queries)
            diff = max((abs(ra[q][d] - rb[q].get(d, float("nan"))) for q in queries for d in list(ra[q])[:10]
                        if d in rb[q]), default=0.0)
            eq[mode] = {"ndcg@10_incremental": 100 * evaluate(qrels, ra, ("ndcg@10",))["ndcg@10"],
                        "ndcg@10_fresh": 100 * evaluate(qrels, rb, ("ndcg@10",))["ndcg@10"],
                        "identical_top10": same, "max_score_diff": diff}
        res["equivalence"] = eq
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2))
    print(json.dumps(res, indent=2))
    plot(res, out.with_suffix(".png"))


def plot(res: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    segs = sorted(res["latency"], key=int)
    fig, ax = plt.subplots(figsize=(6, 4))
    for mode in ("bm25", "dense", "sparse", "hybrid"):
        ax.plot([int(s) for s in segs], [res["latency"][s][mode]["median_ms"] for s in segs], marker="o", label=mode)
    ax.set_xscale("log")
    ax.set_xlabel("segments")
    ax.set_ylabel("median search latency (ms)")
    ax.set_title(f"qmsum-train ({res['documents']} documents): latency by segment count")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
