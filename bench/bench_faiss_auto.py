"""Where `--faiss auto` switches from exact (flat) search to HNSW: one query at a time, p50 of the
dense leg's FAISS search (ldr's DenseSearcher, multi-vector: a document scores by its best
passage) for the pipeline's 1,000 candidates (`--k`), against the number of stored vectors, and
HNSW's recall of the exact top-10 documents.

    python bench/bench_faiss_auto.py [--sizes 12500,25000,50000,100000,200000,400000] [--queries 200]

Vectors: 4 passages per document, drawn around 2,000 topic centres (unit vectors, noise 0.6 per
dimension scaled to 384 dims) so that neighbours exist as they do in real MaxP vectors; queries
are perturbed passages of random documents. Uniformly random vectors would understate HNSW's
recall. Real-vector recall: `--index IDX --queries Q.jsonl` also builds HNSW over that index's
passage vectors (the MiniLM query encoder) and reports its recall against flat."""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np


def clustered(n: int, d: int, rng, centres: int = 2000) -> np.ndarray:
    c = rng.standard_normal((centres, d), dtype=np.float32)
    c /= np.linalg.norm(c, axis=1, keepdims=True)
    v = c[rng.integers(0, centres, n)] + rng.standard_normal((n, d), dtype=np.float32) * (0.6 / np.sqrt(d))
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def searcher(folder: Path, vectors: np.ndarray, owner: np.ndarray, kind: str):
    from ldr.components.faiss_store import DenseSearcher, FaissSettings, save_dense

    folder.mkdir()
    entry = save_dense(folder, vectors, owner, FaissSettings(index=kind))     # FAISS's threads as ldr runs it
    t = time.perf_counter()
    comp = {"faiss": entry["faiss"], "multi_vector": True, "vectors": len(vectors), "dim": vectors.shape[1]}
    return DenseSearcher(folder, comp), entry["faiss"]["index"], time.perf_counter() - t


def timed(s, queries, k):
    """(p50 ms of a search for the top-k documents, each query's top-10 documents)."""
    lat, out = [], []
    for q in queries:
        t = time.perf_counter()
        out.append([d for d, _ in s.search_rep(q, k)][:10])
        lat.append(1000 * (time.perf_counter() - t))
    return statistics.median(lat), out


def recall(got, want) -> float:
    return float(np.mean([len(set(g) & set(w)) / max(len(w), 1) for g, w in zip(got, want)]))


def main() -> None:

    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="12500,25000,50000,100000,200000,400000")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--k", type=int, default=1000, help="documents per search: the pipeline's depth (1000)")
    ap.add_argument("--index", default=None)
    ap.add_argument("--query-file", default=None)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    d, per = 384, 4
    print("| vectors | flat p50 ms | HNSW p50 ms | HNSW build s | HNSW recall@10 (documents) | auto picks |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for n in (int(x) for x in a.sizes.split(",")):
            vecs = clustered(n, d, rng)
            owner = np.repeat(np.arange(n // per), per)[:n]
            docs = rng.integers(0, n // per, a.queries)
            qs = vecs[docs * per] + rng.standard_normal((a.queries, d), dtype=np.float32) * (0.8 / np.sqrt(d))
            qs /= np.linalg.norm(qs, axis=1, keepdims=True)
            flat, _, _ = searcher(Path(tmp) / f"f{n}", vecs, owner, "flat")
            t = time.perf_counter()
            hnsw, _, _ = searcher(Path(tmp) / f"h{n}", vecs, owner, "hnsw")
            build = time.perf_counter() - t
            _, auto, _ = searcher(Path(tmp) / f"a{n}", vecs, owner, "auto")
            f_ms, want = timed(flat, qs, a.k)
            h_ms, got = timed(hnsw, qs, a.k)
            print(f"| {n:,} | {f_ms:.2f} | {h_ms:.2f} | {build:.1f} | {recall(got, want):.3f} | {auto} |", flush=True)
    if a.index:
        real(a)


def real(a) -> None:
    """HNSW against flat over a real index's passage vectors, with real queries."""
    import ldr
    from ldr.components.faiss_store import load_vectors

    idx = ldr.open(a.index)
    dense = idx.retriever("dense")
    part = dense.parts[0]
    vecs = np.ascontiguousarray(load_vectors(Path(a.index), part.index), dtype=np.float32)
    queries = [json.loads(line)["text"] for line in open(a.query_file, encoding="utf-8")][: a.queries]
    qs = np.stack(idx.query_side("dense").encode_many(queries))
    with tempfile.TemporaryDirectory() as tmp:
        flat, _, _ = searcher(Path(tmp) / "f", vecs, part.owner, "flat")
        hnsw, _, _ = searcher(Path(tmp) / "h", vecs, part.owner, "hnsw")
        _, want = timed(flat, qs, a.k)
        _, got = timed(hnsw, qs, a.k)
    print(f"\nreal vectors ({a.index}: {len(vecs):,} MiniLM passage vectors, {len(qs)} queries): "
          f"HNSW recall@10 of flat's documents {recall(got, want):.3f}")


if __name__ == "__main__":
    main()
