"""The cross-encoder stage on the synthetic passkey and needle tasks: does interpolating it with
the fused score keep (or restore) Acc@1 at every length?

    python bench/synthetic_rerank.py --eval EVAL_OUT [--depth 20] [--windows 4] [--weight 0.15]

EVAL_OUT is an `ldr eval --bench longembed --tasks passkey,needle` output folder: its cached
indexes (EVAL_OUT/cache) are searched again with the cross-encoder (ms-marco-minilm-l12) over the
top `depth` fused candidates, each on its `windows` best passages, mixed at `weight` as a search
with `--rerank-model` does. Prints Acc@1 per task and length for the fused and reranked stages."""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def main() -> None:
    import ldr
    from ldr.eval import benchmarks

    ap = argparse.ArgumentParser()
    ap.add_argument("--eval", required=True)
    ap.add_argument("--model", default="ms-marco-minilm-l12")
    ap.add_argument("--depth", type=int, default=20)
    ap.add_argument("--windows", type=int, default=4)
    ap.add_argument("--weight", type=float, default=0.15)
    ap.add_argument("--only", default=None, help="these task@length names only, e.g. needle@4096,needle@8192")
    a = ap.parse_args()
    out = Path(a.eval)
    s = json.loads((out / "metrics.json").read_text())["settings"]
    tasks = benchmarks.load("longembed", s.get("tasks"), None, s.get("lengths"), s.get("haystack"),
                            s.get("split", "test"), s.get("seed", 0))
    print(f"{'task':<16}{'fused':>7}{'reranked':>10}{'s/query':>9}   (Acc@1; top {a.depth} × {a.windows} passages, "
          f"weight {a.weight})")
    for t in tasks:
        if a.only and t.name not in a.only.split(","):
            continue
        cache = next((out / "cache").glob(f"{t.name}-*"), None)
        if cache is None:
            print(f"{t.name:<16} no cached index in {out / 'cache'}")
            continue
        ix = ldr.open(cache)
        fused = reranked = 0
        t0 = time.perf_counter()
        for qid, text in t.queries.items():
            rel = {d for d, g in t.qrels[qid].items() if g > 0}
            first = ix.search(text, k=1, with_meta=False)
            hits = ix.search(text, k=1, rerank_model=a.model, rerank_depth=a.depth, rerank_windows=a.windows,
                             rerank_weight=a.weight, with_meta=False)
            fused += first[0].id in rel
            reranked += hits[0].id in rel
        n = len(t.queries)
        print(f"{t.name:<16}{100 * fused / n:7.1f}{100 * reranked / n:10.1f}{(time.perf_counter() - t0) / n:9.2f}",
              flush=True)
        ix.close()


if __name__ == "__main__":
    main()
