"""Search latency of a real ldr index at 10k / 100k / 1M documents: cold `ldr search` from the
shell and warm `Index.search` per stage, with the default pipeline (BM25 + dense + sparse, fusion,
the window stage).

Everything is ldr's own code path on a real index on disk (`ldr.build_index`: tantivy, the FAISS
store with `--faiss auto`, the sparse inverted index, the docstore, the manifest), and queries run
through the real query encoders (MiniLM and SPLADE-tiny on ONNX). Only the documents' encodings are
synthetic, because encoding a million documents would take this machine hours:
- dense: clustered unit vectors (bench_faiss_auto.clustered: neighbours exist, as in real MaxP
  vectors), `--per` per document with character spans over the text (MaxP passages), 1 at 1M;
- sparse: the document's own SPLADE word pieces with random positive weights.
Documents are `--words` words drawn (Zipf) from the dense tokenizer's whole-word vocabulary, so BM25
and the sparse leg match real query words. Queries: 50 distinct, 6–9 words each, measured warm after
100 others (models loaded, the mapped index files paged in); cold: 4 of them, each `ldr search` in a
new process (the first may read the index from disk).

    python bench/bench_scale.py [--sizes 10000,100000,1000000] [--keep DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from bench_faiss_auto import clustered  # noqa: E402

import ldr.encode.dense as dense_mod  # noqa: E402
import ldr.encode.sparse as sparse_mod  # noqa: E402
from ldr.corpus import Doc  # noqa: E402
from ldr.encode.batching import token_ids  # noqa: E402


class SyntheticDense:
    """The real encoder for queries and its description; clustered vectors for documents."""

    def __init__(self, real, per: int, seed: int):
        self.real, self.per, self.dim = real, per, real.dim
        self.rng = np.random.default_rng(seed)

    def prepare_documents(self, texts, spans=False, **_):
        return texts, [t.split() for t in texts]        # job[1]: counted as tokens by the writer

    def finish_documents(self, job, progress=None):
        texts, _ = job
        n, per = len(texts), self.per
        vecs = clustered(n * per, self.dim, self.rng)
        owner = np.repeat(np.arange(n), per)
        cuts = np.array([[len(t) * i // per for i in range(per + 1)] for t in texts], dtype=np.int64)
        spans = np.stack([cuts[:, :-1], cuts[:, 1:]], axis=2).reshape(-1, 2)
        if progress:
            progress(n)
        return vecs, owner, spans

    def describe(self):
        return self.real.describe()

    def encode_queries(self, texts):
        return self.real.encode_queries(texts)


class SyntheticSparse:
    """The real encoder for queries and its description; each document's own word pieces with
    random weights for documents."""

    def __init__(self, real, seed: int):
        self.real, self.vocab_size = real, real.vocab_size
        self.rng = np.random.default_rng(seed)

    def prepare_documents(self, texts, **_):
        return texts, token_ids(self.real.tokenizer, list(texts))

    def finish_documents(self, job, progress=None):
        import scipy.sparse as sp

        rows, cols = [], []
        for i, ids in enumerate(job[1]):
            u = np.unique(ids)
            rows.append(np.full(len(u), i))
            cols.append(u)
        rows, cols = np.concatenate(rows), np.concatenate(cols)
        vals = self.rng.lognormal(0, 0.5, len(cols)).astype(np.float32)
        if progress:
            progress(len(job[0]))
        return sp.csr_matrix((vals, (rows, cols)), shape=(len(job[0]), self.vocab_size), dtype=np.float32)

    def describe(self):
        return self.real.describe()


def vocabulary() -> np.ndarray:
    from ldr.encode.models import DEFAULT_DENSE, resolve
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(resolve(DEFAULT_DENSE)[0])
    words = sorted(w for w in tok.get_vocab() if w.isalpha() and w.isascii() and len(w) >= 3)
    return np.array(words)


def documents(n: int, words: np.ndarray, length: int, rng):
    p = 1 / np.arange(1, len(words) + 1)
    p /= p.sum()
    order = rng.permutation(len(words))            # which words are frequent: not alphabetical
    for start in range(0, n, 10_000):
        m = min(10_000, n - start)
        draws = order[rng.choice(len(words), (m, length), p=p)]
        for i in range(m):
            yield Doc(f"d{start + i}", " ".join(words[draws[i]]))


def build(n: int, out: Path, words, length: int, per: int) -> dict:
    """A real index of n synthetic documents (the document encoders swapped for synthetic ones)."""
    from ldr.index.build import BuildConfig, build_index

    real_load_dense, real_load_sparse = dense_mod.load_dense, sparse_mod.load_sparse
    # the document side only: the index records the real models, which its queries then load
    dense_mod.load_dense = lambda s: SyntheticDense(real_load_dense(s), per, seed=1)
    sparse_mod.load_sparse = lambda s: SyntheticSparse(real_load_sparse(s), seed=2)
    try:
        config = BuildConfig(language="en")
        config.dense.backend = config.sparse.backend = "onnx"   # the query engines of every CPU
        return build_index(documents(n, words, length, np.random.default_rng(0)), out, config, progress=False)
    finally:
        dense_mod.load_dense, sparse_mod.load_sparse = real_load_dense, real_load_sparse


def queries(words: np.ndarray, rng, n: int = 50) -> list[str]:
    common = words[rng.permutation(len(words))[:3000]]
    return [" ".join(rng.choice(common, rng.integers(6, 10), replace=False)) for _ in range(n)]


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def warm(path: Path, qs: list[str], warmup: list[str]) -> dict:
    import ldr

    idx = ldr.open(path)
    for q in warmup:                         # models loaded, mapped files paged in (not measured)
        idx.search(q, k=10, with_text=False)
    stages: dict[str, list[float]] = {}
    for q in qs:
        t = time.perf_counter()
        r = idx.search(q, k=10, with_text=False)
        total = time.perf_counter() - t
        for k, v in r.timings_ms.items():
            stages.setdefault(k, []).append(v)
        stages.setdefault("end to end", []).append(1e3 * total)
    idx.close()
    return {k: (statistics.median(v), pct(v, .95)) for k, v in stages.items()}


def cold(path: Path, qs: list[str], runs: int = 4) -> tuple[list[float], float]:
    """`ldr search` from the shell, a new process each time (the first run may read from disk):
    (seconds per run, the largest peak RSS of those processes in MB)."""
    times, peak = [], 0.0
    for q in qs[:runs]:
        t = time.perf_counter()
        p = subprocess.Popen([sys.executable, "-m", "ldr.cli", "search", q, "-i", str(path)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(p.pid, 0)      # this process's own peak, not the builds'
        times.append(time.perf_counter() - t)
        p.returncode = os.waitstatus_to_exitcode(status)
        if p.returncode:
            raise SystemExit(f"ldr search failed on {path} (exit {p.returncode})")
        peak = max(peak, usage.ru_maxrss / 1024)
    return times, peak


def disk_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--words", type=int, default=120, help="words per document")
    ap.add_argument("--per", type=int, default=4, help="dense vectors per document (1 from 1M on: memory)")
    ap.add_argument("--keep", default=None, help="build the indexes here and keep them")
    ap.add_argument("--json", default=None)
    ap.add_argument("--build-only", action="store_true", help="with --keep: build the indexes, measure nothing")
    ap.add_argument("--build-one", nargs=2, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    words = vocabulary()
    if args.build_one:
        build(int(args.build_one[0]), Path(args.build_one[1]), words, args.words, args.per)
        return
    qs = queries(words, np.random.default_rng(3), 150)     # 50 measured, 100 to warm up
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="ldr-scale-"))
    rows = []
    print("| docs | dense vectors | FAISS | build s | index MB | cold `ldr search` s (first; median of next) "
          "| its peak RSS MB | warm p50 ms | warm p95 ms |\n|---|---|---|---|---|---|---|---|---|", flush=True)
    for n in [int(x) for x in args.sizes.split(",")]:
        out = root / f"scale-{n}"
        per = args.per if n < 1_000_000 else 1
        if not out.exists():
            # in a child: encoders are shared within a process (ldr.components.registry), and the
            # searches below must load the real ones
            t = time.perf_counter()
            subprocess.run([sys.executable, __file__, "--build-one", str(n), str(out), "--words", str(args.words),
                            "--per", str(per)], check=True)
            b = {"seconds": time.perf_counter() - t}
        else:
            b = {"seconds": float("nan")}
        if args.build_only:
            print(f"built {out} in {b['seconds']:.0f} s", flush=True)
            continue
        import ldr

        with ldr.open(out) as idx:
            dense = idx.info()["components"]["dense"]
            vectors = dense["vectors"]
            faiss_type = "+".join(sorted({e["dense"]["faiss"]["index"] for e in idx._view.segments.entries}))
        c, rss = cold(out, qs[10:])
        w = warm(out, qs[:50], warmup=qs[50:])
        row = {"docs": n, "vectors": vectors, "faiss": faiss_type, "build_s": b["seconds"], "mb": disk_mb(out),
               "cold_s": c, "cold_peak_mb": rss, "warm": w}
        rows.append(row)
        print(f"| {n:,} | {vectors:,} | {faiss_type} | {b['seconds']:.0f} | {row['mb']:.0f} | "
              f"{c[0]:.2f}; {statistics.median(c[1:]):.2f} | {rss:.0f} | {w['end to end'][0]:.1f} | {w['end to end'][1]:.1f} |",
              flush=True)
        print("    stages p50/p95 ms: " + ", ".join(f"{k} {a:.1f}/{b_:.1f}" for k, (a, b_) in w.items()), flush=True)
        if not args.keep:
            shutil.rmtree(out)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
