"""`ldr index` (dense only) against sentence-transformers on the same passages (issue 80).

ldr: the whole command a user runs, `ldr index CORPUS -o IDX --sparse none --bm25 none` (process
start, reading, tokenising, encoding, writing), timed from outside. sentence-transformers: the
passages ldr's dense model encodes (MaxP windows of 256 tokens), decoded to text and given to
`SentenceTransformer.encode` at batch 32 in fp32, as a user chunking the corpus would run it,
the model load not counted. Each engine is a separate `ldr index` (`--backend`).

    python bench/bench_index_vs_st.py [--docs 40] [--backends auto,onnx] [--st-passages 0]

`--st-passages N` times sentence-transformers on N of the passages (spread evenly) and scales to
all of them, for a quicker run. Print: the CPU's instruction sets, tokens, seconds, tokens/s, ratio.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def ldr_index(corpus: Path, out: Path, backend: str) -> tuple[float, float]:
    """(wall seconds, peak RSS MB) of one `ldr index` run in its own process."""
    cmd = [sys.executable, "-m", "ldr.cli", "index", str(corpus), "-o", str(out), "--sparse", "none",
           "--bm25", "none", "--backend", backend, "--quiet"]
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)        # this child's own peak, not the largest child's so far
    wall = time.perf_counter() - t
    if status:
        raise SystemExit(f"ldr index failed: {proc.stderr.read().decode()[-2000:]}")
    return wall, usage.ru_maxrss / 1024


def recorded_engine(out: Path) -> str:
    man = sorted(out.glob("manifest-*.json"))[-1]
    return json.loads(man.read_text())["components"]["dense"]["model"]["backend"]["name"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=str(ROOT.parent / "shared/data/qmsum-train/corpus.jsonl"))
    ap.add_argument("--docs", type=int, default=40)
    ap.add_argument("--backends", default="auto,onnx")
    ap.add_argument("--st-passages", type=int, default=0, help="time sentence-transformers on this many (0: all)")
    args = ap.parse_args()
    logging.disable(logging.WARNING)
    from ldr.encode.dense import DenseSettings, load_dense
    from ldr.encode.models import resolve
    from ldr.encode.runtime import cpu_flags

    lines = open(args.data, encoding="utf-8").read().splitlines()[:args.docs]
    texts = [json.loads(x)["text"] for x in lines]
    isa = sorted(f for f in cpu_flags() if f.startswith("avx512_") or f in ("avx2", "amx_bf16", "avx512f"))
    print(f"CPU: {os.cpu_count()} cores, {', '.join(isa)}; {len(texts)} documents, "
          f"{sum(map(len, texts)):,} characters")
    enc = load_dense(DenseSettings(backend="onnx"))
    pieces, _ = enc._pieces(texts, enc.doc_prefix, enc.settings.strategy)
    n_tokens = sum(map(len, pieces))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp, "corpus.jsonl")
        corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
        for b in args.backends.split(","):
            out = Path(tmp, f"idx-{b}")
            wall, peak = ldr_index(corpus, out, b)
            rows.append((f"ldr index, --backend {b} ({recorded_engine(out)})", wall, f"{peak:,.0f} MB"))

    from sentence_transformers import SentenceTransformer
    st = SentenceTransformer(resolve("minilm")[0], device="cpu")
    st.max_seq_length = enc.window
    passages = [st.tokenizer.decode(p, skip_special_tokens=True) for p in pieces]
    sample = passages if not args.st_passages else passages[::max(1, len(passages) // args.st_passages)]
    st.encode(sample[:32], batch_size=32)
    t = time.perf_counter()
    st.encode(sample, batch_size=32)
    st_s = (time.perf_counter() - t) * len(passages) / len(sample)
    rows.insert(0, (f"sentence-transformers fp32, {len(sample)} of {len(passages)} passages, encode only", st_s, ""))
    print(f"\n{len(passages):,} passages, {n_tokens:,} tokens (ldr's MaxP windows)\n")
    print("| run | seconds | tokens/s | vs sentence-transformers | peak RSS |")
    print("|---|---|---|---|---|")
    for name, s, peak in rows:
        print(f"| {name} | {s:.1f} | {n_tokens / s:,.0f} | {st_s / s:.2f}x | {peak} |")


if __name__ == "__main__":
    main()
