"""The colbert component on qmsum-train: build speed (tokens/s), bytes per document token on
disk, and query latency per stage (warm, one query at a time).

    python bench/bench_colbert.py [--out /tmp/colbert-idx] [--queries 50]

Builds BM25 + colbert-small (the defaults: 128 dims, pool factor 2) in a fresh index."""
from __future__ import annotations

import argparse
import json
import resource
import shutil
import time
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "qmsum-train"


def main() -> None:
    import ldr
    from ldr.encode.colbert import ColbertSettings

    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=str(DATA))
    ap.add_argument("--out", default="/tmp/colbert-idx")
    ap.add_argument("--queries", type=int, default=50)
    a = ap.parse_args()
    out = Path(a.out)
    shutil.rmtree(out, ignore_errors=True)
    docs = [json.loads(x) for x in open(Path(a.data) / "corpus.jsonl")]
    t0 = time.perf_counter()
    idx = ldr.Index.build([{"id": r["_id"], "text": r["text"], "title": r.get("title", "")} for r in docs], out,
                          dense=None, sparse=None, components={"colbert": ColbertSettings()}, progress=False)
    build_s = time.perf_counter() - t0
    m = json.loads(sorted(out.glob("manifest-*.json"))[-1].read_text())
    seg_bytes = sum(f.stat().st_size for f in out.glob("segments/*/colbert/*") if f.is_file())
    n_vec = m["components"]["colbert"].get("vectors") or sum(s["colbert"]["vectors"] for s in m["segments"])
    enc = ldr.components.ENCODERS.loaded()[0]
    n_tok = sum(len(enc.tokenizer(f"{r.get('title')}\n{r['text']}" if r.get("title") else r["text"],
                                  add_special_tokens=False)["input_ids"]) for r in docs)
    print(f"build (BM25 + colbert-small, 128 dims, pool 2): {build_s:.0f} s, {n_tok / build_s:.0f} document tokens/s, "
          f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    print(f"colbert on disk: {seg_bytes / 1e6:.1f} MB, {n_vec} vectors for {n_tok} tokens: "
          f"{seg_bytes / n_tok:.1f} bytes per document token")
    qs = [json.loads(x)["text"] for x in open(Path(a.data) / "queries.jsonl")][: a.queries]
    settings = {"bm25": dict(mode="bm25"), "colbert (brute force)": dict(mode="colbert"),
                "fused bm25 + colbert": dict(),
                "bm25, then --rerank colbert top-100": dict(weights={"colbert": 0.0}, rerank="colbert"),
                "fused, then cross-encoder top-30 x 2 windows": dict(rerank_model="ms-marco-minilm-l12",
                                                                    rerank_depth=30, rerank_windows=2)}
    for name, kw in settings.items():
        idx.search(qs[0], k=10, **kw)           # warm: models loaded, files mapped
        times = []
        for q in qs[: (10 if "cross" in name else len(qs))]:
            t = time.perf_counter()
            idx.search(q, k=10, **kw)
            times.append(time.perf_counter() - t)
        print(f"{name:<46} p50 {1000 * np.median(times):7.1f} ms  p90 {1000 * np.percentile(times, 90):7.1f} ms")


if __name__ == "__main__":
    main()
