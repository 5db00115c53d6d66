"""Encoding throughput, one run, same passages: sentence-transformers (PyTorch fp32) against ldr's
backends (torch, onnx, onnx-int8, bf16) for the dense model, and ldr's backends for the SPLADE model;
tokens/s, ratio to the reference, % of the fp32 GEMM peak measured now, minimum cosine to PyTorch.

    python bench/bench_encode.py [--passages 600] [--words 200] [--max-length 256] [--repeat 3]

The CPU's instruction sets are printed with the results: compare speeds only within one run.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import time
from pathlib import Path

import numpy as np
import torch

from ldr.encode.dense import DenseSettings, load_dense
from ldr.encode.models import resolve
from ldr.encode.runtime import cpu_flags
from ldr.encode.sparse import SparseSettings, load_sparse

ROOT = Path(__file__).resolve().parents[1]
BACKENDS = ("torch", "onnx", "onnx-int8", "bf16")


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


def best_of(fn, repeat: int):
    fn()                                   # warm: first-call allocations, ORT arena
    best, out = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def min_cos(a: np.ndarray, b: np.ndarray) -> float:
    a = a / np.linalg.norm(a, axis=1, keepdims=True).clip(1e-12)
    b = b / np.linalg.norm(b, axis=1, keepdims=True).clip(1e-12)
    return float((a * b).sum(1).min())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=str(ROOT.parent / "shared/data/qmsum-train/corpus.jsonl"))
    ap.add_argument("--passages", type=int, default=600)
    ap.add_argument("--words", type=int, default=200, help="words per passage (~256 tokens at 200)")
    ap.add_argument("--max-length", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=32, help="sentence-transformers batch size")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", default=None, help="also write the rows here")
    args = ap.parse_args()
    logging.disable(logging.WARNING)
    texts = [json.loads(x)["text"] for x in open(args.data, encoding="utf-8")]
    words = " ".join(texts).split()
    passages = [" ".join(words[i:i + args.words]) for i in range(0, args.words * args.passages, args.words)]
    flags = cpu_flags()
    isa = sorted(f for f in flags if f.startswith("avx512") or f in ("avx2", "avx_vnni", "amx_int8", "amx_bf16"))
    peak = gemm_peak()
    print(f"CPU: {os.cpu_count()} cores, {', '.join(isa)}; torch threads {torch.get_num_threads()}; "
          f"fp32 GEMM peak measured now {peak / 1e9:.0f} GFLOP/s")

    # -- dense ---------------------------------------------------------------------------------
    from sentence_transformers import SentenceTransformer
    st = SentenceTransformer(resolve("minilm")[0], device="cpu")
    st.max_seq_length = args.max_length
    encs = {b: load_dense(DenseSettings(strategy="truncate", max_length=args.max_length, device="cpu", backend=b))
            for b in BACKENDS}
    n_tokens = sum(min(len(x), args.max_length - 2) + 2
                   for x in st.tokenizer(passages, add_special_tokens=False, verbose=False)["input_ids"])
    fpt = flops_per_token(st[0].auto_model, args.max_length)
    rows = []
    dt, ref = best_of(lambda: st.encode(passages, batch_size=args.batch_size, normalize_embeddings=True), args.repeat)
    rows.append(("sentence-transformers (torch fp32)", dt, ref))
    for b, enc in encs.items():
        dt, out = best_of(lambda: enc.encode_documents(passages)[0], args.repeat)
        rows.append((f"ldr {b}", dt, out))
    print(f"\nDense: all-MiniLM-L6-v2, {len(passages)} passages of {args.words} words, max length {args.max_length}, "
          f"{n_tokens} tokens, best of {args.repeat}")
    print("| encoder | seconds | tokens/s | vs sentence-transformers | % of fp32 GEMM peak | min cosine to PyTorch |")
    print("|---|---|---|---|---|---|")
    result = {"cpu": isa, "peak_gflops": peak / 1e9, "dense": [], "sparse": []}
    for name, dt, out in rows:
        tps = n_tokens / dt
        cos = min_cos(out, ref)
        print(f"| {name} | {dt:.2f} | {tps:,.0f} | {tps * rows[0][1] / n_tokens:.2f}x | {100 * tps * fpt / peak:.0f}% | {cos:.6f} |")
        result["dense"].append({"encoder": name, "seconds": dt, "tokens_per_s": tps, "cosine_min": cos})

    # -- sparse (SPLADE: the MLM head inside the graph for onnx) ---------------------------------
    sp = {b: load_sparse(SparseSettings(backend=b, max_length=args.max_length, device="cpu")) for b in BACKENDS}
    n_sp = sum(len(x) for x in sp["torch"].tokenizer(passages, add_special_tokens=False, verbose=False)["input_ids"])
    print(f"\nSparse: splade-tiny, same passages, {n_sp} tokens (+ specials)")
    print("| encoder | seconds | tokens/s | vs ldr torch | min cosine to PyTorch | term sets (mean Jaccard) |")
    print("|---|---|---|---|---|---|")
    base = None
    for b, enc in sp.items():
        dt, out = best_of(lambda: enc.encode_documents(passages).toarray(), args.repeat)
        base = base or (dt, out)
        got, ref = out > 0, base[1] > 0          # (not `b`: that names the backend in the row)
        same = float(((got & ref).sum(1) / np.maximum((got | ref).sum(1), 1)).mean())
        cos = min_cos(out, base[1])
        print(f"| ldr {b} | {dt:.2f} | {n_sp / dt:,.0f} | {base[0] / dt:.2f}x | {cos:.6f} | {same:.4f} |")
        result["sparse"].append({"encoder": f"ldr {b}", "seconds": dt, "tokens_per_s": n_sp / dt, "cosine_min": cos})
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
