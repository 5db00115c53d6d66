"""Grow, not rebuild: adding 1% to an HNSW index and merging, against the previous code's merge
(which builds the graph again from every vector), with recall@10 against exact search.

Two modes:
- `ldr` (default): a real dense-only ldr index of `--docs` documents x `--per` passage vectors (the
  long-document shape: MaxP passages), built by `build_index`; `--add` more documents are added
  with ldr's writer, then the same index copy is merged by `ldr merge` twice: by this code and by
  `--old` (a checkout of the previous code, run as `PYTHONPATH=OLD python -m ldr.cli merge`).
  Passage vectors are synthetic (bench_scale.SyntheticDense: clustered, as real MaxP vectors);
  the index is ldr's own files on disk.
- `faiss` (`--faiss-only`): needs only numpy and faiss (for a machine without ldr's dependencies):
  the same operations ldr runs (IndexHNSWFlat M=32, efConstruction 200, efSearch 128, inner
  product), a full build of N vectors, then the grow step (read the index, insert 1%, write it).

Recall@10: the index's top 10 vector ids against an exact (flat) scan of the same vectors, for
queries near stored vectors.

    python bench/bench_grow.py --docs 10000 --per 10 --add 100 --old /work/oldtree
    python bench/bench_grow.py --faiss-only --vectors 1000000
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def clustered(n: int, d: int, rng, centres: np.ndarray) -> np.ndarray:
    v = centres[rng.integers(0, len(centres), n)] + rng.standard_normal((n, d), dtype=np.float32) * (0.6 / np.sqrt(d))
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def recall_at_10(index, vectors: np.ndarray, rng, n_queries: int = 500) -> float:
    import faiss

    d = vectors.shape[1]
    q = vectors[rng.integers(0, len(vectors), n_queries)] + rng.standard_normal((n_queries, d), dtype=np.float32) * 0.02
    q = np.ascontiguousarray(q / np.linalg.norm(q, axis=1, keepdims=True), dtype=np.float32)
    flat = faiss.IndexFlatIP(d)
    flat.add(np.ascontiguousarray(vectors, dtype=np.float32))
    _, truth = flat.search(q, 10)
    _, got = index.search(q, 10)
    return float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(truth, got)]))


def one_query_ms(index, vectors: np.ndarray, rng, n: int = 200) -> dict:
    """One query at a time on one thread, as a search does: p50/p95 of the index search alone (ms)."""
    import faiss

    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    times = []
    for row in rng.integers(0, len(vectors), n):
        t = time.perf_counter()
        index.search(vectors[row:row + 1], 100)
        times.append((time.perf_counter() - t) * 1e3)
    faiss.omp_set_num_threads(threads)
    return {"p50": round(float(np.percentile(times, 50)), 2), "p95": round(float(np.percentile(times, 95)), 2)}


def faiss_only(args) -> dict:
    import faiss

    rng = np.random.default_rng(0)
    d, n, extra = args.dim, args.vectors, args.vectors // 100
    centres = rng.standard_normal((2000, d), dtype=np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    base, more = clustered(n, d, rng, centres), clustered(extra, d, rng, centres)
    work = Path(tempfile.mkdtemp())
    t = time.perf_counter()
    index = faiss.IndexHNSWFlat(d, 32, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = 200
    index.add(base)
    faiss.write_index(index, str(work / "base.index"))
    full = time.perf_counter() - t
    print(f"built {n} vectors in {full:.1f} s", file=sys.stderr, flush=True)
    del index
    t = time.perf_counter()
    grown = faiss.read_index(str(work / "base.index"))
    grown.add(more)
    faiss.write_index(grown, str(work / "grown.index"))
    grow = time.perf_counter() - t
    grown.hnsw.efSearch = 128
    out = {"mode": "faiss", "vectors": n, "added": extra, "dim": d, "threads": faiss.omp_get_max_threads(),
           "full_build_s": round(full, 1), "grow_s": round(grow, 2), "grow_share": round(grow / full, 4),
           "index_gb": round((work / "grown.index").stat().st_size / 1e9, 2),
           "search_ms": one_query_ms(grown, more, rng),
           "recall10_grown": recall_at_10(grown, np.concatenate([base, more]), rng),
           "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6, 1)}
    print(json.dumps(out), file=sys.stderr, flush=True)      # kept should the rebuild run out of time
    if args.rebuild:           # the previous code's merge: a graph built from all n + 1% vectors
        t = time.perf_counter()
        again = faiss.IndexHNSWFlat(d, 32, faiss.METRIC_INNER_PRODUCT)
        again.hnsw.efConstruction = 200
        again.add(np.concatenate([base, more]))
        out["rebuild_s"] = round(time.perf_counter() - t, 1)
        again.hnsw.efSearch = 128
        out["recall10_rebuilt"] = recall_at_10(again, np.concatenate([base, more]), rng)
    shutil.rmtree(work)
    return out


def timed_merge(path: Path, pythonpath: str | None) -> float:
    env = dict(os.environ, **({"PYTHONPATH": pythonpath} if pythonpath else {}))
    t = time.perf_counter()
    # cwd: `python -m` puts it first on sys.path, before PYTHONPATH
    subprocess.run([sys.executable, "-m", "ldr.cli", "merge", "-i", str(path)], check=True, env=env,
                   stdout=subprocess.DEVNULL, cwd=pythonpath or path.parent)
    return time.perf_counter() - t


def merged_recall(path: Path, rng) -> tuple[float, str]:
    import faiss

    import ldr

    seg = ldr.open(path).manifest["segments"]
    assert len(seg) == 1, seg
    folder = path / seg[0]["path"] / seg[0]["dense"]["path"]
    index = faiss.read_index(str(folder / "faiss.index"))
    index.hnsw.efSearch = seg[0]["dense"]["faiss"]["ef_search"]
    return recall_at_10(index, index.reconstruct_n(0, index.ntotal), rng), seg[0]["dense"]["faiss"]["index"]


def ldr_mode(args) -> dict:
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_scale import SyntheticDense, documents, vocabulary

    import ldr.encode.dense as dense_mod
    from ldr.corpus import Doc
    from ldr.index.build import BuildConfig, build_index
    import ldr

    work = Path(args.keep or tempfile.mkdtemp())
    words = vocabulary()
    class Clustered(SyntheticDense):
        """One set of 2,000 centres for every batch (bench_scale draws new ones per batch: near
        random vectors, on which no graph finds neighbours)."""

        centres = None

        def finish_documents(self, job, progress=None):
            vecs, owner, spans = super().finish_documents(job, progress)
            if Clustered.centres is None:
                c = self.rng.standard_normal((2000, self.dim), dtype=np.float32)
                Clustered.centres = c / np.linalg.norm(c, axis=1, keepdims=True)
            return clustered(len(vecs), self.dim, self.rng, Clustered.centres), owner, spans

    real = dense_mod.load_dense
    dense_mod.load_dense = lambda s: Clustered(real(s), args.per, seed=1)
    try:
        config = BuildConfig(language="en", bm25=None, sparse=None)
        config.dense.backend = "onnx"
        t = time.perf_counter()
        build_index(documents(args.docs, words, 60, np.random.default_rng(0)), work / "idx", config, progress=False)
        full = time.perf_counter() - t
        extra = [Doc(f"new{d.id}", d.text) for d in documents(args.add, words, 60, np.random.default_rng(5))]
        t = time.perf_counter()
        ldr.open(work / "idx").add(extra)
        add = time.perf_counter() - t
    finally:
        dense_mod.load_dense = real
    out = {"mode": "ldr", "docs": args.docs, "per": args.per, "added_docs": args.add, "full_build_s": round(full, 1),
           "add_s": round(add, 2)}
    for name, pythonpath in (("new", None), ("old", args.old)):
        if name == "old" and not args.old:
            continue
        copy = work / f"merge-{name}"
        shutil.copytree(work / "idx", copy)
        out[f"merge_{name}_s"] = round(timed_merge(copy, pythonpath), 2)
        out[f"recall10_{name}"], out[f"faiss_{name}"] = merged_recall(copy, np.random.default_rng(3))
        shutil.rmtree(copy)
    out["merge_share_new"] = round(out["merge_new_s"] / full, 4)
    if not args.keep:
        shutil.rmtree(work)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--faiss-only", action="store_true")
    ap.add_argument("--vectors", type=int, default=1_000_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--rebuild", action="store_true", help="faiss mode: also build the n + 1%% graph anew")
    ap.add_argument("--docs", type=int, default=10_000)
    ap.add_argument("--per", type=int, default=10)
    ap.add_argument("--add", type=int, default=100)
    ap.add_argument("--old", help="a checkout of the previous code, for its merge")
    ap.add_argument("--keep")
    args = ap.parse_args()
    print(json.dumps(faiss_only(args) if args.faiss_only else ldr_mode(args)), flush=True)


if __name__ == "__main__":
    main()
