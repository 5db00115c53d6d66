"""Array helpers the stages share."""
from __future__ import annotations

import numpy as np


def ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The indices start, start + 1, ..., start + count - 1 of each (start, count), one range after
    another (int64): where several postings lists or a document's vectors lie in one array, to be
    read in one call."""
    counts = np.asarray(counts, dtype=np.int64)
    ends = np.cumsum(counts)
    total = int(ends[-1]) if len(ends) else 0
    return np.repeat(np.asarray(starts, dtype=np.int64) - ends + counts, counts) + np.arange(total)
