"""The cross-encoder stage on the synthetic passkey and needle tasks: does interpolating it with
the fused score keep (or restore) Acc@1 at every length?

    python bench/sweeps/synthetic_rerank.py --eval EVAL_OUT [--depth 20] [--windows 4] [--weight 0.15]

EVAL_OUT is an `ldr eval --bench longembed --tasks passkey,needle` output folder: its cached
indexes (EVAL_OUT/cache) are searched again with the cross-encoder (ms-marco-minilm-l12) over the
top `depth` fused candidates, each on its `windows` best passages, mixed at each of `weights` as
a search with `--rerank-model` does (ldr.search.pipeline.mix; the cross-encoder runs once per
query). Prints Acc@1 per task and length for the fused stage and each weight."""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def main() -> None:
    import numpy as np

    import ldr
    from ldr.eval import benchmarks
    from ldr.search.pipeline import mix

    ap = argparse.ArgumentParser()
    ap.add_argument("--eval", required=True)
    ap.add_argument("--model", default="ms-marco-minilm-l12")
    ap.add_argument("--depth", type=int, default=20)
    ap.add_argument("--windows", type=int, default=4)
    ap.add_argument("--weights", default="0.15", help="mixing weights, compared on one cross-encoder pass")
    ap.add_argument("--only", default=None, help="these task@length names only, e.g. needle@4096,needle@8192")
    a = ap.parse_args()
    out = Path(a.eval)
    s = json.loads((out / "metrics.json").read_text())["settings"]
    tasks = benchmarks.load("longembed", s.get("tasks"), None, s.get("lengths"), s.get("haystack"),
                            s.get("split", "test"), s.get("seed", 0))
    weights = [float(w) for w in a.weights.split(",")]
    print(f"Acc@1; top {a.depth} × {a.windows} passages\n{'task':<16}{'fused':>7}"
          + "".join(f"{'w=' + str(w):>8}" for w in weights) + f"{'s/query':>9}")
    for t in tasks:
        if a.only and t.name not in a.only.split(","):
            continue
        cache = next((out / "cache").glob(f"{t.name}-*"), None)
        if cache is None:
            print(f"{t.name:<16} no cached index in {out / 'cache'}")
            continue
        ix = ldr.open(cache)
        fused, right = 0, dict.fromkeys(weights, 0)
        t0 = time.perf_counter()
        for qid, text in t.queries.items():
            rel = {d for d, g in t.qrels[qid].items() if g > 0}
            hits = ix.search(text, k=a.depth, rerank_model=a.model, rerank_depth=a.depth, rerank_windows=a.windows,
                             rerank_weight=1.0, with_meta=False)
            first = np.array([h.scores["fused"] for h in hits])
            ce = np.array([h.scores["rerank"] for h in hits])
            fused += hits[int(np.argmax(first))].id in rel
            for w in weights:
                right[w] += hits[int(np.argmax(mix(ce, first, w)))].id in rel
        n = len(t.queries)
        print(f"{t.name:<16}{100 * fused / n:7.1f}" + "".join(f"{100 * right[w] / n:8.1f}" for w in weights)
              + f"{(time.perf_counter() - t0) / n:9.2f}", flush=True)
        ix.close()


if __name__ == "__main__":
    main()
