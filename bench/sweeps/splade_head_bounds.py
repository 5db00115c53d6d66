"""Could SPLADE's vocabulary head skip the columns a window leaves at zero (issue 80)? A window's
weight for term v is log1p(relu(max_t h_t·w_v + b_v)): zero unless some token's logit passes -b_v.
An upper bound on max_t h_t·w_v that is cheaper than the product would let the exact product run
on the remaining columns only. Counted on qmsum-train's windows (the bf16 engine's states):

- the share of (window, term) pairs that are not zero;
- a box bound (each hidden dimension's min and max over the window's tokens, or over groups of G
  tokens): the share of pairs (tokens x terms for groups) it cannot rule out;
- a low-rank bound (the states' top r principal directions exactly, the rest by Cauchy-Schwarz):
  the same share, at a cost of r/hidden of the product.

    python bench/sweeps/splade_head_bounds.py --data ../shared/data/qmsum-train --docs 3
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, type=Path)
    ap.add_argument("--docs", type=int, default=3)
    ap.add_argument("--group", type=int, default=16)
    a = ap.parse_args()
    import torch

    import ldr.encode.sparse as sparse

    states = []
    real = sparse.head_max_torch

    def kept(h, mask, w, bias):
        states.extend((h[i][mask[i]].float().to(torch.bfloat16).float(), w.float(), bias) for i in range(h.shape[0]))
        return real(h, mask, w, bias)

    sparse.head_max_torch = kept
    enc = sparse.SparseEncoder(sparse.SparseSettings(), bf16=True)
    texts = [json.loads(line)["text"][:20000] for line in open(a.data / "corpus.jsonl")][:a.docs]
    enc._encode_documents(texts)
    half = len(states) // 2
    total = nonzero = box = groups = 0
    for st, w, bias in states[half:]:
        pos, neg = w.clamp(min=0), w.clamp(max=0)
        total += w.shape[1]
        nonzero += int(((st @ w).max(0).values + bias > 0).sum())
        box += int((st.max(0).values @ pos + st.min(0).values @ neg + bias > 0).sum())
        for s in range(0, len(st), a.group):
            g = st[s:s + a.group]
            groups += int((g.max(0).values @ pos + g.min(0).values @ neg + bias > 0).sum()) * len(g) / len(st)
    print(f"{len(states) - half} windows: pairs not zero {nonzero / total:.2%}; box bound keeps {box / total:.2%} "
          f"(a window), {groups / total:.2%} (groups of {a.group})")
    basis = torch.linalg.svd(torch.cat([s for s, _, _ in states[:half]]), full_matrices=False)[2]
    for r in (32, 64, 96):
        p = basis[:r]
        kept_pairs = 0
        for st, w, bias in states[half:]:
            pw = p @ w
            rest_w = (w - p.T @ pw).norm(dim=0)
            ph = st @ p.T
            rest_h = (st - ph @ p).norm(dim=1)
            kept_pairs += int(((ph @ pw + rest_h[:, None] * rest_w[None, :]).max(0).values + bias > 0).sum())
        print(f"rank {r} ({r / states[0][0].shape[1]:.0%} of the product): keeps {kept_pairs / total:.2%}")


if __name__ == "__main__":
    main()
