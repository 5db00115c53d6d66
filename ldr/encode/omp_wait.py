"""How long PyTorch's OpenMP threads spin before they sleep, in a process that encodes a corpus.

A build loads its models on the feeding thread and runs them on the pipeline's worker
(encode/pipeline.py): each thread that starts a parallel region gets its own OpenMP team, so
libgomp then manages more threads than a 2-core machine has cores. In that state it spins only
100 times (its "throttled" count) before a waiting thread sleeps on a futex, and a batch's
thousands of products each end in a join whose wake-up costs more than the product: a default
build of 40 qmsum-train meetings spent 6-10 s in the kernel. OMP_WAIT_POLICY=ACTIVE makes the
throttled count 1,000, and GOMP_SPINCOUNT keeps the spin of a lone team at libgomp's default
(300,000, not ACTIVE's 30 billion: idle threads still go to sleep). The same build: 71.8 -> 61.4 s
wall at the same CPU (bench/README.md, "Building").

libgomp reads both when it is loaded, with torch: they are set only before that, and only where
the user set neither.
"""
from __future__ import annotations

import os
import sys

SETTINGS = {"OMP_WAIT_POLICY": "ACTIVE", "GOMP_SPINCOUNT": "300000"}


def spin_before_sleeping() -> bool:
    """Set SETTINGS for this process if torch is not loaded yet and the user set neither; returns
    whether it did."""
    if "torch" in sys.modules or any(k in os.environ for k in SETTINGS):
        return False
    os.environ.update(SETTINGS)
    return True
