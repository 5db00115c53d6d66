"""Dense encoding throughput: ldr's encoder vs sentence-transformers `encode`, same model, same
texts, same max length, in the same run; plus the machine's fp32 GEMM peak measured here.

    python bench/bench_encode.py [--docs 64] [--max-length 256]
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from ldr.encode.dense import DenseEncoder, DenseSettings

ROOT = Path(__file__).resolve().parents[1]


def gemm_peak(n: int = 2048, reps: int = 10) -> float:
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    t = time.perf_counter()
    for _ in range(reps):
        a @ b
    return 2 * n ** 3 * reps / (time.perf_counter() - t)


def flops_per_token(model, seq: int) -> float:
    """2·(non-embedding params) + attention (QK^T and AV: 4·seq·hidden per layer)."""
    cfg = model.config
    params = sum(p.numel() for n, p in model.named_parameters() if "embeddings" not in n)
    return 2 * params + 4 * seq * cfg.hidden_size * cfg.num_hidden_layers


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=str(ROOT.parent / "shared/data/qmsum-train/corpus.jsonl"))
    ap.add_argument("--docs", type=int, default=64)
    ap.add_argument("--max-length", type=int, default=256)
    ap.add_argument("--strategies", default="truncate,pcw,maxp")
    args = ap.parse_args()
    lines = open(args.data, encoding="utf-8").read().splitlines()
    texts = [json.loads(x)["text"] for x in lines]
    # truncate comparison: many texts of mixed length, as a corpus of passages would be
    words = " ".join(texts[:40]).split()
    rng = np.random.default_rng(0)
    short = [" ".join(words[i:i + int(rng.integers(20, 220))]) for i in range(0, 200_000, 250)][:800]
    peak = gemm_peak()
    print(f"fp32 GEMM peak measured now: {peak / 1e9:.0f} GFLOP/s, threads={torch.get_num_threads()}")
    enc = DenseEncoder(DenseSettings(strategy="truncate", max_length=args.max_length, device="cpu"))
    st = enc.st
    st.max_seq_length = args.max_length
    n_tokens = sum(min(len(x), args.max_length - 2) + 2
                   for x in enc.tokenizer(short, add_special_tokens=False, verbose=False)["input_ids"])
    rows = []
    for name, fn in [("sentence-transformers", lambda: st.encode(short, batch_size=32, normalize_embeddings=True)),
                     ("ldr", lambda: enc.encode_documents(short)[0])]:
        fn()  # warm
        t = time.perf_counter()
        out = fn()
        dt = time.perf_counter() - t
        rows.append((name, dt, n_tokens / dt, out))
    cos = float((rows[0][3] * rows[1][3]).sum(1).min())
    fpt = flops_per_token(enc.hf, 128)
    print(f"| encoder | texts | tokens | seconds | tokens/s | % of GEMM peak |")
    print("|---|---|---|---|---|---|")
    for name, dt, tps, _ in rows:
        print(f"| {name} | {len(short)} | {n_tokens} | {dt:.2f} | {tps:.0f} | {100 * tps * fpt / peak:.0f}% |")
    print(f"ldr / sentence-transformers speed: {rows[1][2] / rows[0][2]:.2f}x; min cosine between outputs {cos:.6f}")
    docs = texts[: args.docs]
    for strat in args.strategies.split(","):
        if strat == "truncate":
            continue
        e = DenseEncoder(DenseSettings(strategy=strat, max_length=args.max_length, device="cpu"))
        ntok = sum(len(x) for x in e.tokenizer(docs, add_special_tokens=False, verbose=False)["input_ids"])
        t = time.perf_counter()
        e.encode_documents(docs)
        dt = time.perf_counter() - t
        print(f"long documents, {strat}: {len(docs)} docs, {ntok} tokens, {dt:.1f}s, {ntok / dt:.0f} tokens/s, "
              f"{100 * (ntok / dt) * fpt / peak:.0f}% of peak")


if __name__ == "__main__":
    main()
