"""Quality with compressed passage vectors: the same index with flat vectors and converted by
`ldr merge --faiss rabitq` (nothing re-encoded), every judged query, dense and default mode,
nDCG@10 paired (bench/qmsum_eval.py); also the share of queries whose top 10 ids are identical.

    cp -r IDX /tmp/rq && ldr merge -i /tmp/rq --faiss rabitq
    python bench/sweeps/compressed_quality.py --flat IDX --compressed /tmp/rq --data ../shared/data/qmsum-train
"""
from __future__ import annotations

import sys
import argparse
import json
from pathlib import Path

import numpy as np

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))   # bench/: the helpers the sweeps share
from qmsum_eval import judged, ndcg10  # noqa: E402

import ldr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--flat", required=True)
    ap.add_argument("--compressed", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--modes", default="dense,default")
    ap.add_argument("--max-queries", type=int, default=0)
    ap.add_argument("--out")
    a = ap.parse_args()
    rels, texts = judged(Path(a.data))
    qids = sorted(texts)[:a.max_queries or None]
    flat, comp = ldr.open(a.flat), ldr.open(a.compressed)
    out = {"data": a.data, "queries": len(qids), "flat": a.flat, "compressed": a.compressed, "modes": {}}
    for mode in a.modes.split(","):
        kw = {} if mode == "default" else {"mode": mode}
        f, c, same = [], [], 0
        for q in qids:
            hf = flat.search(texts[q], k=10, **kw)
            hc = comp.search(texts[q], k=10, **kw)
            f.append(ndcg10([h.id for h in hf], rels[q]))
            c.append(ndcg10([h.id for h in hc], rels[q]))
            same += [h.id for h in hf] == [h.id for h in hc]
        f, c = np.array(f), np.array(c)
        diff = c - f
        se = diff.std(ddof=1) / np.sqrt(len(diff)) if len(diff) > 1 else 0.0
        out["modes"][mode] = {"flat_ndcg10": round(100 * f.mean(), 2), "compressed_ndcg10": round(100 * c.mean(), 2),
                              "diff": round(100 * diff.mean(), 3), "diff_se": round(100 * se, 3),
                              "same_top10": round(same / len(qids), 4)}
        print(mode, json.dumps(out["modes"][mode]), flush=True)
    if a.out:
        Path(a.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
