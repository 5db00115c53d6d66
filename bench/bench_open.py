"""Opening a large index: cold `ldr search` on one segment of N documents (BM25 only, so that the
figure is the docstore's and the search path's, not an encoder's), this code against an older
checkout, paired with farm-bench.

    python bench/bench_open.py build DIR [--docs 1000000]      # once: a real index built by ldr
    farm-bench -n 5 --timeout 600 -- python -m ldr.cli search "marsh heron 7" -i DIR/idx -k 10 \
        --vs "env PYTHONPATH=OLD_CHECKOUT python -m ldr.cli search 'marsh heron 7' -i DIR/idx -k 10"

Documents: 30 words drawn (Zipf) from 5,000 words, ids in no particular order (a hash), a title each.
"""
from __future__ import annotations

import argparse
import hashlib
import sys
import time
from pathlib import Path

import numpy as np

import ldr


def documents(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(5000)] + ["marsh", "heron", "tide", "reed", "egret"]
    p = 1.0 / np.arange(1, len(words) + 1)
    p /= p.sum()
    for i in range(n):
        picks = rng.choice(len(words), size=30, p=p)
        doc_id = hashlib.blake2b(str(i).encode(), digest_size=8).hexdigest()
        yield {"id": doc_id, "title": f"Document {i}", "text": " ".join(words[j] for j in picks) + f" {i % 97}"}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["build"])
    ap.add_argument("dir")
    ap.add_argument("--docs", type=int, default=1_000_000)
    a = ap.parse_args()
    t = time.perf_counter()
    idx = ldr.Index.build(documents(a.docs), Path(a.dir) / "idx", dense=None, sparse=None, bm25="native")
    print(f"{len(idx):,} documents in {time.perf_counter() - t:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
