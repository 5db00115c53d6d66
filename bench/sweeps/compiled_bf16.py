"""Would `torch.compile` (inductor, weights frozen) make the bf16 document engine pay (issue 80)?

The bf16 engine runs full windows 8 rows at a time (batching.fixed_shapes); this compiles that
one shape (static, weights frozen into prepacked bf16 kernels) and leaves other rows eager, then
encodes the same documents both ways, alternated, in one process. Prints the compile's cost
(first call; a second process reuses inductor's cache), the paired median of the two, and the
vectors' least cosine to the eager engine's.

    python bench/sweeps/compiled_bf16.py [--docs 8] [--rounds 4]
"""
from __future__ import annotations

import argparse
import json
import logging
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from ldr.encode.batching import BF16_ROWS
from ldr.encode.dense import DenseSettings, load_dense

ROOT = Path(__file__).resolve().parents[2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=str(ROOT.parent / "shared/data/qmsum-train/corpus.jsonl"))
    ap.add_argument("--docs", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args()
    logging.disable(logging.WARNING)
    docs = [json.loads(x)["text"] for x in open(args.data, encoding="utf-8").read().splitlines()[:args.docs]]
    enc = load_dense(DenseSettings(backend="bf16", device="cpu"))
    eager = enc.hf
    full = (BF16_ROWS, enc.window)
    compiled = torch.compile(eager, dynamic=False, options={"freezing": True})

    class FullWindowsCompiled(torch.nn.Module):
        def forward(self, **kw):
            return (compiled if tuple(kw["input_ids"].shape) == full else eager)(**kw)

    engines = {"eager": eager, "compiled": FullWindowsCompiled()}
    t = time.perf_counter()
    enc.hf = engines["compiled"]
    enc.encode_documents(docs[:1])
    print(f"compile (first call): {time.perf_counter() - t:.1f} s")
    times, vecs = {k: [] for k in engines}, {}
    for r in range(args.rounds):
        for name in (engines if r % 2 == 0 else list(engines)[::-1]):
            enc.hf = engines[name]
            t = time.perf_counter()
            vecs[name] = enc.encode_documents(docs)[0]
            times[name].append(time.perf_counter() - t)
    ratio = statistics.median(e / c for e, c in zip(times["eager"], times["compiled"]))
    cos = float((vecs["eager"] * vecs["compiled"]).sum(1).min())
    print(f"{len(docs)} documents, {len(vecs['eager'])} windows: eager {statistics.median(times['eager']):.2f} s, "
          f"compiled {statistics.median(times['compiled']):.2f} s, paired speed-up {ratio:.2f}x, "
          f"least cosine {cos:.6f}, identical rows {int(np.all(vecs['eager'] == vecs['compiled'], axis=1).sum())}")


if __name__ == "__main__":
    main()
