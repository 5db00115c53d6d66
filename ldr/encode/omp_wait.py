"""How long PyTorch's OpenMP threads spin before they sleep, in a process that encodes a corpus.

Each thread that starts a parallel region gets its own OpenMP team. A build that loaded its models
on the feeding thread and ran them on the pipeline's worker had two, more libgomp threads than a
2-core machine's cores, and libgomp then spins only 100 times (its "throttled" count) before a
waiting thread sleeps on a futex: a batch's thousands of products each end in a join whose
wake-up costs more than the product. OMP_WAIT_POLICY=ACTIVE makes that count 1,000, and
GOMP_SPINCOUNT keeps the spin of a lone team at libgomp's default (300,000, not ACTIVE's 30
billion: idle threads still go to sleep). A default build of 40 qmsum-train meetings: 71.8 -> 61.4 s
wall at the same CPU. The models now load on the worker (encode/pipeline.py, `Pipeline.call`), one
team; the setting stays for what else starts one (measured 0.97x the wall time with it, 2 pairs).
bench/README.md, "Building".

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
