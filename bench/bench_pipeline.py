"""Search pipeline latency, warm, per stage and end to end, at 10k / 100k / 1M documents, and the
cold start of `ldr search` from the shell.

Real: the query encoders (MiniLM, SPLADE-tiny), tantivy BM25 over synthetic documents, ldr's
dense store (`--faiss auto`: flat, or HNSW past 50k vectors), ldr's sparse inverted index,
fusion and the passage rescorer.
Synthetic (for index-size scaling): document vectors (random unit vectors, 4 passages per
document up to 100k documents, 1 at 1M to fit in memory), sparse postings (Zipf terms, 128 per document) and BM25 documents (60 random words
from a 50k-word vocabulary).

    python bench/bench_pipeline.py [--sizes 10000,100000,1000000] [--cold-index IDX]
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from bench_sparse import build as build_sparse  # noqa: E402

from ldr.encode.dense import DenseSettings, load_dense  # noqa: E402
from ldr.encode.sparse import SparseSettings, load_sparse  # noqa: E402
from ldr.components.sparse_store import SparseIndex  # noqa: E402
from ldr.search.fusion import fuse  # noqa: E402

QUERIES = ["what did the team decide about the budget for the remote control",
           "passkey for the user named Jeffrey", "how is the bearing corrosion repaired",
           "termination notice period of the license", "which features did young users want",
           "sourdough bulk fermentation time", "who relit the lighthouse lamp during the storm",
           "capital ratio of the cooperative bank"] * 5


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def real_index(path: str, queries_file: str, n: int = 300) -> None:
    """Warm per-stage latency of the real pipeline (Index.search) on a real index."""
    import json

    import ldr

    idx = ldr.open(path)
    qs = [json.loads(line)["text"] for line in open(queries_file, encoding="utf-8")][:n]
    # the default; without the window stage (its cost, same run); with the passage rescorer
    for rerank, window in ((False, None), (False, 0.0), ("passage", None)):
        idx.search(qs[0], k=10, rerank=rerank, window_weight=window)  # warm: models loaded, caches filled
        stages: dict[str, list[float]] = {}
        for q in qs:
            t, cpu = time.perf_counter(), time.process_time()
            result = idx.search(q, k=10, rerank=rerank, with_text=False, window_weight=window)
            total, cpu = time.perf_counter() - t, time.process_time() - cpu
            for k, v in result.timings_ms.items():
                stages.setdefault(k, []).append(v)
            stages.setdefault("end to end", []).append(1e3 * total)
            # every thread of the process (a BLAS or ONNX thread spinning after its work counts)
            stages.setdefault("CPU a search", []).append(1e3 * cpu)
        print(f"{path} ({len(idx)} docs), {len(qs)} queries, k=10, rerank={rerank or 'none'}, "
              f"window_weight={'default' if window is None else window} "
              "(bm25/dense/sparse include query encoding)")
        print("| stage | p50 ms | p95 ms |\n|---|---|---|")
        for k, v in stages.items():
            print(f"| {k} | {statistics.median(v):.2f} | {pct(v, .95):.2f} |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--cold-index", default=None, help="an ldr index to time `ldr search` cold starts against")
    ap.add_argument("--index", default=None, help="a real ldr index: per-stage warm latency over --queries")
    ap.add_argument("--queries", default=None, help="BEIR queries.jsonl for --index")
    args = ap.parse_args()
    if args.index:
        real_index(args.index, args.queries)
        return
    import tantivy  # noqa: F401

    from ldr.components.faiss_store import DenseSearcher, FaissSettings, save_dense

    from ldr.components.analysis import Analyzer
    from ldr.components.bm25_store.tantivy_backend import TantivySearcher, TantivyWriter
    from ldr.corpus import Doc

    dense = load_dense(DenseSettings(device="cpu"))       # the default engines (ONNX on a CPU)
    sparse = load_sparse(SparseSettings(device="cpu"))
    rng = np.random.default_rng(0)
    words = np.array([f"w{i}" for i in range(50000)])
    p = 1 / np.arange(1, 50001) ** 1.0
    p /= p.sum()
    print("| docs | stage | p50 ms | p95 ms |")
    print("|---|---|---|---|")
    for n in [int(x) for x in args.sizes.split(",")]:
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            per = 4 if n <= 100_000 else 1      # 1M x 4 x 384 floats would not leave room for the rest
            vecs = rng.standard_normal((per * n, 384), dtype=np.float32)
            vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
            owner = np.repeat(np.arange(n), per)
            # ldr's dense store as `ldr index` writes it: --faiss auto picks flat or HNSW by size
            (tmp / "dense").mkdir()
            entry = save_dense(tmp / "dense", vecs, owner, FaissSettings())
            de = DenseSearcher(tmp / "dense", {"faiss": entry["faiss"], "multi_vector": per > 1,
                                               "vectors": len(vecs), "dim": 384}, None)
            fi = de.index
            print(f"| {n:,} | FAISS index (auto) | {entry['faiss']['index']} | |", flush=True)
            build_sparse(n, rng, tmp / "sparse")
            sidx = SparseIndex(tmp / "sparse")
            w = TantivyWriter(tmp / "bm25", Analyzer(), threads=2)
            draws = rng.choice(50000, (n, 60), p=p)   # one call: per-document calls dominate at 1M
            for i in range(n):
                w.add(i, Doc(str(i), " ".join(words[draws[i]])))
            w.close()
            bm = TantivySearcher(tmp / "bm25", Analyzer())
            stages = {k: [] for k in ("encode dense", "encode sparse", "bm25", "dense", "sparse", "fusion",
                                      "rerank", "end to end")}
            for q in QUERIES:
                t0 = time.perf_counter()
                qv = dense.encode_queries([q])[0]
                t1 = time.perf_counter()
                qs = sparse.encode_queries([q])
                t2 = time.perf_counter()
                q_bm = " ".join(words[rng.choice(2000, 6)])
                r_bm = dict(bm.search(q_bm, 1000))
                t3 = time.perf_counter()
                r_de = dict(de.search_rep(qv, 1000))
                t4 = time.perf_counter()
                r_sp = dict(sidx.top_k(rng.choice(3000, 24, replace=False), rng.lognormal(0, .5, 24).astype(np.float32), 1000))
                t5 = time.perf_counter()
                fused = fuse({"bm25": r_bm, "dense": r_de, "sparse": r_sp}, "rrf")
                top = sorted(fused, key=lambda d: -fused[d])[:100]
                t6 = time.perf_counter()
                # passage rescoring: best passage from FAISS, exact sparse, bm25 lookup
                rows_ = np.concatenate([np.arange(per * d, per * d + per) for d in top])
                best = (fi.reconstruct_batch(rows_) @ qv).reshape(-1, per).max(1)
                qt, qw = qs.indices, qs.data
                sp_scores = [sidx.doc_score(d, qt, qw) for d in top]
                t7 = time.perf_counter()
                for k, v in zip(stages, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5, t7 - t6, t7 - t0)):
                    stages[k].append(1e3 * v)
            for k, v in stages.items():
                print(f"| {n:,} | {k} | {statistics.median(v):.2f} | {pct(v, .95):.2f} |", flush=True)
    if args.cold_index:
        for mode in ("bm25", "hybrid"):
            times = []
            for _ in range(3):
                t = time.perf_counter()
                subprocess.run([sys.executable, "-m", "ldr.cli", "search", "budget decision", "-i", args.cold_index,
                                "--mode", mode], check=True, capture_output=True)
                times.append(time.perf_counter() - t)
            print(f"cold start `ldr search --mode {mode}`: median {statistics.median(times):.2f}s over 3 runs")


if __name__ == "__main__":
    main()
