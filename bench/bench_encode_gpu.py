"""Dense encoding throughput on a GPU, one run, the same texts: sentence-transformers (fp16) against
ldr's PyTorch engine on CUDA (fp16, token-budget batches), on passages and on whole long documents
(MaxP: every window of every document, what `ldr index` encodes).

    python bench/bench_encode_gpu.py --model MODEL_DIR --data corpus.jsonl [--budgets 16384,65536]

Tokens are counted with the model's tokenizer as each engine feeds them (specials included). The
first call of each engine is a warm-up; the best of --repeat runs is reported. Compare speeds only
within one run: the GPU, its clocks and the host CPU differ between machines.
"""
from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

import torch

from bench_encode import best_of as cpu_best_of, min_cos     # noqa: E402  (bench/ is the script's folder)
from ldr.encode.dense import DenseEncoder, DenseSettings


def best_of(fn, repeat: int):
    """bench_encode's best_of, each call waited for on the GPU (CUDA runs asynchronously)."""
    def synced():
        out = fn()
        torch.cuda.synchronize()
        return out
    return cpu_best_of(synced, repeat)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--passages", type=int, default=8000)
    ap.add_argument("--words", type=int, default=200)
    ap.add_argument("--max-length", type=int, default=256)
    ap.add_argument("--budgets", default="16384,65536", help="ldr's token budgets per forward pass to try")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    logging.disable(logging.WARNING)
    docs = [json.loads(x)["text"] for x in open(args.data, encoding="utf-8")]
    words = " ".join(docs).split()
    passages = [" ".join(words[i:i + args.words]) for i in range(0, args.words * args.passages, args.words)]
    passages = [p for p in passages if p]
    gpu = torch.cuda.get_device_name(0)
    print(f"GPU: {gpu}; torch {torch.__version__}; {len(passages)} passages of {args.words} words, "
          f"{len(docs)} documents")

    from sentence_transformers import SentenceTransformer
    st = SentenceTransformer(args.model, device="cuda")
    st.half()
    st.max_seq_length = args.max_length
    ids = st.tokenizer(passages, add_special_tokens=False, verbose=False)["input_ids"]
    n_tok = sum(min(len(x), args.max_length - 2) + 2 for x in ids)
    rows, result = [], {"gpu": gpu, "torch": torch.__version__, "passages": [], "documents": []}
    ref = None
    for bs in (32, 128, 512):
        dt, out = best_of(lambda: st.encode(passages, batch_size=bs, normalize_embeddings=True), args.repeat)
        ref = out if ref is None else ref
        rows.append((f"sentence-transformers fp16, batch {bs}", dt, out))
    for budget in map(int, args.budgets.split(",")):
        enc = DenseEncoder(DenseSettings(model=args.model, strategy="truncate", max_length=args.max_length,
                                         device="cuda", batch_tokens=budget))
        dt, out = best_of(lambda: enc.encode_documents(passages)[0], args.repeat)
        rows.append((f"ldr torch fp16 (cuda), {budget} tokens per pass", dt, out))
    print(f"\nPassages, max length {args.max_length}: {n_tok:,} tokens")
    print("| encoder | seconds | tokens/s | vs sentence-transformers batch 32 | min cosine to it |")
    print("|---|---|---|---|---|")
    for name, dt, out in rows:
        print(f"| {name} | {dt:.3f} | {n_tok / dt:,.0f} | {rows[0][1] / dt:.2f}x | {min_cos(out, ref):.5f} |")
        result["passages"].append({"encoder": name, "seconds": dt, "tokens_per_s": n_tok / dt})

    # whole long documents, MaxP: what `ldr index` encodes (every window, overlaps included)
    print(f"\nWhole documents, MaxP ({len(docs)} documents)")
    print("| encoder | seconds | windows | tokens fed | tokens/s |")
    print("|---|---|---|---|---|")
    for budget in map(int, args.budgets.split(",")):
        enc = DenseEncoder(DenseSettings(model=args.model, strategy="maxp", device="cuda", batch_tokens=budget))
        fed = []
        orig = enc._forward

        def counted(batch, orig=orig, fed=fed):
            fed.append(sum(len(x) for x in batch))
            return orig(batch)
        enc._forward = counted
        dt, out = best_of(lambda: enc.encode_documents(docs)[0], args.repeat)
        tokens = sum(fed) / (args.repeat + 1)
        print(f"| ldr maxp, {budget} tokens per pass | {dt:.3f} | {len(out):,} | {tokens:,.0f} | {tokens / dt:,.0f} |")
        result["documents"].append({"budget": budget, "seconds": dt, "windows": len(out), "tokens": tokens,
                                    "tokens_per_s": tokens / dt})
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
