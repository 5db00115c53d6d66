"""Compressed passage vectors against the other ways to hold them, on the same vectors in one run.

Two parts (`figures/bench_compressed.json`):

- `side` (`--side N`): N MaxP-shaped clustered vectors (bench_grow.clustered: 2,000 topics, as
  real passage vectors cluster by document and subject) and, with `--real IDX`, the MiniLM passage
  vectors of a real ldr index (qmsum-train: 8,498). Each way runs in its own process: FAISS flat
  (exact), HNSW float32 (ldr's M 32 / efConstruction 200 / efSearch 128), HNSW SQ8, ldr's rabitq
  part (its own writer and reader: codes in RAM, exact rescoring from vectors.f32), usearch int8
  HNSW, LanceDB IVF_PQ. Reported: build seconds, recall@10 against exact, one-thread query latency
  p50/p95 at top 10 and at the pipeline's 4,000 passage rows (1,000 documents x 4), the bytes per
  vector a search keeps in RAM (structure: what every query touches) and the process's measured
  RSS growth (anonymous and file pages) after open + 200 warm queries, and disk bytes per vector.
- `scale` (`--scale N`): ldr's rabitq part alone at N vectors (2M here): build, merge after +1%
  (Dense.merge_parts, the codebook reused, the codes copied), cold open after dropping the page
  cache, warm latency and recall per depth, RSS.

    pip install -e '.[bench]'                 # usearch and lancedb, the peers
    python bench/bench_compressed.py --side 200000 --real /tmp/ldr-shards/default --scale 2000000
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from bench_grow import clustered  # noqa: E402

D = 384
METHODS = ("flat", "hnsw", "hnsw_sq8", "ldr_rabitq", "usearch_i8", "lancedb_ivfpq")


def rss() -> dict:
    out = {}
    for line in open("/proc/self/status"):
        if line.startswith(("RssAnon:", "RssFile:", "RssShmem:")):
            out[line.split(":")[0]] = int(line.split()[1]) * 1024
    return out


def make_vectors(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((2000, D), dtype=np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    x = np.empty((n, D), np.float32)
    for a in range(0, n, 500_000):
        x[a:a + 500_000] = clustered(min(500_000, n - a), D, rng, centres)
    q = x[rng.integers(0, n, 200)] + rng.standard_normal((200, D), dtype=np.float32) * 0.02
    return x, np.ascontiguousarray(q / np.linalg.norm(q, axis=1, keepdims=True), dtype=np.float32)


def real_vectors(index: Path, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A real index's passage vectors; queries: its own vectors, perturbed (as bench_grow does)."""
    import faiss

    idx = json.loads(sorted(Path(index).glob("manifest-*.json"))[-1].read_text())
    vecs = []
    for seg in idx["segments"]:
        f = faiss.read_index(str(Path(index) / seg["path"] / "dense" / "faiss.index"))
        vecs.append(f.reconstruct_n(0, f.ntotal))
    x = np.concatenate(vecs)
    rng = np.random.default_rng(seed)
    q = x[rng.integers(0, len(x), 200)] + rng.standard_normal((200, x.shape[1]), dtype=np.float32) * 0.02
    return x, np.ascontiguousarray(q / np.linalg.norm(q, axis=1, keepdims=True), dtype=np.float32)


def truth(x: np.ndarray, q: np.ndarray, k: int = 10) -> np.ndarray:
    import faiss

    flat = faiss.IndexFlatIP(x.shape[1])
    flat.add(x)
    return flat.search(q, k)[1]


# -- one method, in its own process ----------------------------------------------------------
class Way:
    """build(x, folder) → seconds; open(folder); search(q, k) → ids; ram_per_vector(n)."""

    def __init__(self, name: str, d: int):
        self.name, self.d = name, d

    def build(self, x, folder: Path):
        import faiss

        t = time.perf_counter()
        if self.name == "flat":
            ix = faiss.IndexFlatIP(self.d)
        elif self.name == "hnsw":
            ix = faiss.IndexHNSWFlat(self.d, 32, faiss.METRIC_INNER_PRODUCT)
            ix.hnsw.efConstruction = 200
        elif self.name == "hnsw_sq8":
            ix = faiss.IndexHNSWSQ(self.d, faiss.ScalarQuantizer.QT_8bit, 32, faiss.METRIC_INNER_PRODUCT)
            ix.hnsw.efConstruction = 200
            ix.train(x)
        elif self.name == "ldr_rabitq":
            from ldr.components.faiss_store import FaissSettings, save_dense
            (folder / "dense").mkdir(parents=True)
            self.entry = save_dense(folder / "dense", x, np.arange(len(x)) // 10, FaissSettings(index="rabitq"),
                                    root=folder)
            return time.perf_counter() - t
        elif self.name == "usearch_i8":
            from usearch.index import Index
            ix = Index(ndim=self.d, metric="ip", dtype="i8", connectivity=32, expansion_add=200, expansion_search=128)
            ix.add(np.arange(len(x)), x, threads=2)
            ix.save(str(folder / "usearch.index"))
            return time.perf_counter() - t
        elif self.name == "lancedb_ivfpq":
            import lancedb
            import pyarrow as pa
            db = lancedb.connect(str(folder / "lance"))
            tbl = db.create_table("v", pa.table({"id": np.arange(len(x)), "vector": pa.FixedSizeListArray.from_arrays(
                pa.array(x.reshape(-1)), self.d)}))
            tbl.create_index(metric="dot", index_type="IVF_PQ", num_partitions=max(1, int(np.sqrt(len(x)))),
                             num_sub_vectors=48)
            return time.perf_counter() - t
        if ix.ntotal == 0:
            ix.add(x)
        faiss.write_index(ix, str(folder / "faiss.index"))
        return time.perf_counter() - t

    def open(self, folder: Path, n: int):
        import faiss

        if self.name == "ldr_rabitq":
            from ldr.components.faiss_store import DenseSearcher
            self.s = DenseSearcher(folder / "dense", {**self.entry, "dim": self.d}, n // 10 + 1)
            self.ix = self.s.index
        elif self.name == "usearch_i8":
            from usearch.index import Index
            self.ix = Index.restore(str(folder / "usearch.index"), view=True)
            self.ix.expansion_search = 128
        elif self.name == "lancedb_ivfpq":
            import lancedb
            self.tbl = lancedb.connect(str(folder / "lance")).open_table("v")
        else:
            flags = faiss.IO_FLAG_MMAP_IFC | faiss.IO_FLAG_READ_ONLY
            self.ix = faiss.read_index(str(folder / "faiss.index"), flags)
            if hasattr(self.ix, "hnsw"):
                self.ix.hnsw.efSearch = 128

    def search(self, q: np.ndarray, k: int) -> np.ndarray:
        if self.name == "usearch_i8":
            return np.asarray(self.ix.search(q, k, threads=1).keys)
        if self.name == "lancedb_ivfpq":
            r = self.tbl.search(q).metric("dot").nprobes(16).refine_factor(max(1, 400 // k)).limit(k) \
                .select(["id"]).to_arrow()
            return np.asarray(r["id"])
        return self.ix.search(q[None], k)[1][0]

    def ram_per_vector(self, n: int) -> float:
        if self.name == "flat":
            return self.d * 4
        if self.name == "hnsw":
            return self.d * 4 + 32 * 2 * 4 * 1.06
        if self.name == "hnsw_sq8":
            return self.d + 32 * 2 * 4 * 1.06
        if self.name == "ldr_rabitq":
            return self.entry["bytes"]["ram_per_vector"]
        if self.name == "usearch_i8":      # int8 vectors + graph, all walked: its whole (mapped) file
            return self.ix.serialized_length / n
        return 48 + 8       # IVF_PQ 48 sub-vectors: its codes and row ids (lance reads them from disk)


def one(args) -> dict:
    import faiss

    x = np.load(args.vectors, mmap_mode="r")
    x = np.ascontiguousarray(x)
    q = np.load(args.queries)
    gt = np.load(args.truth)
    folder = Path(args.folder)
    way = Way(args.one, x.shape[1])
    faiss.omp_set_num_threads(2)
    build = way.build(x, folder)
    n = len(x)
    del x
    before = rss()
    way.open(folder, n)
    faiss.omp_set_num_threads(1)
    out = {"method": args.one, "vectors": n, "build_s": round(build, 2)}
    for k in (10, 4000):
        times, rec = [], []
        for i, qq in enumerate(q):
            t = time.perf_counter()
            ids = way.search(qq, k)
            times.append((time.perf_counter() - t) * 1e3)
            rec.append(len(set(np.asarray(ids[:10]).tolist()) & set(gt[i].tolist())) / 10)
        out[f"top{k}"] = {"p50_ms": round(float(np.percentile(times, 50)), 2),
                          "p95_ms": round(float(np.percentile(times, 95)), 2), "recall@10": round(float(np.mean(rec)), 4)}
    after = rss()
    out["ram_per_vector"] = round(way.ram_per_vector(n), 1)
    out["rss_growth_mb"] = {k: round((after.get(k, 0) - before.get(k, 0)) / 1e6, 1) for k in after}
    out["disk_per_vector"] = round(sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / n, 1)
    return out


def side(x: np.ndarray, q: np.ndarray, label: str, work: Path, methods) -> list[dict]:
    np.save(work / "x.npy", x)
    np.save(work / "q.npy", q)
    np.save(work / "gt.npy", truth(x, q))
    rows = []
    for m in methods:
        folder = work / m
        folder.mkdir()
        r = subprocess.run([sys.executable, __file__, "--one", m, "--vectors", str(work / "x.npy"), "--queries",
                            str(work / "q.npy"), "--truth", str(work / "gt.npy"), "--folder", str(folder)],
                           capture_output=True, text=True)
        row = json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 else \
            {"method": m, "error": r.stderr.strip().splitlines()[-1][:300]}
        row["data"] = label
        print(json.dumps(row), flush=True)
        rows.append(row)
        shutil.rmtree(folder, ignore_errors=True)
    return rows


def scale(n: int, work: Path) -> dict:
    """ldr's rabitq part at n vectors: build, +1% merged, cold open, warm latency and recall."""
    import faiss

    from ldr.components.dense import Dense
    from ldr.components.faiss_store import DenseSearcher, FaissSettings, save_dense
    from ldr.components.states import MergeState, SegmentPart

    x, q = make_vectors(n + n // 100, seed=1)
    gt = truth(x, q)
    base, extra = x[:n], x[n:]
    root = work / "scale"
    faiss.omp_set_num_threads(2)
    out = {"vectors": n, "dim": D}
    parts = []
    for name, v, first in (("seg-1", base, 0), ("seg-2", extra, n)):
        folder = root / "segments" / name / "dense"
        folder.mkdir(parents=True)
        t = time.perf_counter()
        entry = save_dense(folder, v, (np.arange(len(v)) + first) // 10 - first // 10, FaissSettings(index="rabitq"),
                           root=root, codebook=parts[0].entry["codebook"] if parts else None)
        if not parts:
            out["build_s"] = round(time.perf_counter() - t, 1)
            out["codebook"] = entry["codebook"]
        parts.append(SegmentPart(folder, int(v.shape[0] // 10), entry, {}, root))
    del x, base, extra
    comp = {"faiss": FaissSettings(index="rabitq").to_dict(), "dim": D, "codebook": parts[0].entry["codebook"]}
    rows = [np.arange(p.docs) + (0 if i == 0 else parts[0].docs) for i, p in enumerate(parts)]
    (root / "segments" / "seg-3").mkdir()
    t = time.perf_counter()
    merged = Dense().merge_parts(MergeState(root, "dense", comp, parts, rows, root / "segments" / "seg-3"))
    out["merge_plus_1pct_s"] = round(time.perf_counter() - t, 1)
    out["merge_share_of_build"] = round(out["merge_plus_1pct_s"] / out["build_s"], 3)
    out["merged_codebook_same"] = merged["codebook"] == out["codebook"]
    folder = root / "segments" / "seg-3" / "dense"
    out["disk_per_vector"] = merged["bytes"]["disk_per_vector"]
    out["ram_per_vector"] = merged["bytes"]["ram_per_vector"]
    subprocess.run(["sync"])
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        out["cold"] = "page cache dropped"
    except OSError:
        out["cold"] = "page cache could not be dropped (not root)"
    before = rss()
    t = time.perf_counter()
    s = DenseSearcher(folder, {**merged, "dim": D}, None)
    out["cold_open_s"] = round(time.perf_counter() - t, 3)
    faiss.omp_set_num_threads(1)
    t = time.perf_counter()
    s.index.search(q[:1], 10)
    out["cold_first_query_ms"] = round((time.perf_counter() - t) * 1e3, 1)
    for k in (10, 100, 4000):
        for _ in range(2):          # the second pass is warm
            times, rec = [], []
            for i in range(len(q)):
                t = time.perf_counter()
                _, ids = s.index.search(q[i:i + 1], k)
                times.append((time.perf_counter() - t) * 1e3)
                rec.append(len(set(ids[0][:10].tolist()) & set(gt[i].tolist())) / 10)
        out[f"warm_top{k}"] = {"p50_ms": round(float(np.percentile(times, 50)), 2),
                               "p95_ms": round(float(np.percentile(times, 95)), 2),
                               "recall@10": round(float(np.mean(rec)), 4)}
    after = rss()
    out["rss_growth_mb"] = {k: round((after.get(k, 0) - before.get(k, 0)) / 1e6, 1) for k in after}
    print(json.dumps(out), flush=True)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--side", type=int, default=0)
    ap.add_argument("--real")
    ap.add_argument("--scale", type=int, default=0)
    ap.add_argument("--methods", default=",".join(METHODS))
    ap.add_argument("--out", default=str(Path(__file__).parent / "figures" / "bench_compressed.json"))
    ap.add_argument("--one")
    ap.add_argument("--vectors")
    ap.add_argument("--queries")
    ap.add_argument("--truth")
    ap.add_argument("--folder")
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args)))
        return
    work = Path(tempfile.mkdtemp(prefix="bench-compressed-", dir=os.environ.get("BENCH_TMP")))
    result = {"cpu": os.cpu_count(), "side": [], "scale": None}
    try:
        methods = args.methods.split(",")
        if args.real:
            x, q = real_vectors(Path(args.real))
            (work / "real").mkdir()
            result["side"] += side(x, q, f"real: {args.real} ({len(x)} MiniLM passage vectors)", work / "real", methods)
        if args.side:
            x, q = make_vectors(args.side)
            (work / "syn").mkdir()
            result["side"] += side(x, q, f"synthetic clustered {args.side}", work / "syn", methods)
            del x
        if args.scale:
            result["scale"] = scale(args.scale, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
