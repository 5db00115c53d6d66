"""Peak memory of one SelfExtend forward pass at 4k/8k/16k tokens on a tiny random RoPE model.

Each length runs in a fresh process (peak RSS from the kernel), so the figure is the attention's
working memory plus a small model. `--ldr-src DIR` measures another checkout (e.g. a `git worktree`
of an older commit) in the same run for a before/after ratio.

    python bench/sweeps/bench_selfextend_memory.py [--lengths 4096,8192,16384] [--ldr-src DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

CHILD = r"""
import resource, sys, time, torch, transformers as tf
from ldr.encode.extend import Extension, apply_extension
n = int(sys.argv[1])
torch.manual_seed(0)
model = tf.Qwen3Model(tf.Qwen3Config(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                     num_key_value_heads=2, head_dim=16, intermediate_size=128,
                                     max_position_embeddings=512)).eval()
apply_extension(model, Extension("selfextend", target_length=max(n, 1024), group=None, window=64))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
ids = torch.randint(5, 1000, (1, n))
t = time.perf_counter()
with torch.inference_mode():
    out = model(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, before / 1024, time.perf_counter() - t,
      bool(torch.isfinite(out).all()))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lengths", default="4096,8192,16384")
    ap.add_argument("--ldr-src", default=None)
    ap.add_argument("--timeout", type=float, default=600)
    args = ap.parse_args()
    env = dict(os.environ, **({"PYTHONPATH": args.ldr_src} if args.ldr_src else {}))
    rows = []
    for n in map(int, args.lengths.split(",")):
        try:
            # cwd outside the checkout: `python -c` puts the cwd first on sys.path, which would shadow --ldr-src
            r = subprocess.run([sys.executable, "-c", CHILD, str(n)], capture_output=True, text=True, env=env,
                               timeout=args.timeout, cwd=tempfile.gettempdir())
            if r.returncode != 0:
                rows.append({"tokens": n, "error": (r.stderr.strip().splitlines() or ["killed"])[-1][:200]})
            else:
                peak, base, secs, finite = r.stdout.split()
                rows.append({"tokens": n, "peak_rss_mb": round(float(peak)), "model_rss_mb": round(float(base)),
                             "seconds": round(float(secs), 2), "finite": finite == "True"})
        except subprocess.TimeoutExpired:
            rows.append({"tokens": n, "error": f"over {args.timeout:.0f}s"})
        print(json.dumps(rows[-1]), flush=True)
    print(json.dumps({"date": time.strftime("%Y-%m-%d"), "src": args.ldr_src or "this checkout", "rows": rows}))


if __name__ == "__main__":
    main()
