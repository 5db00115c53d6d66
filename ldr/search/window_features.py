"""What a shard tells the coordinator of a document's windows for one query (WindowFeatures), and
the map of them a shard's answer carries (FeatureMap), which crosses processes as one buffer:
pickled as they are, six small arrays a document made a 4-shard Ray query spend ~2 ms of its
replicas' time and ~1 ms of its coordinator's in numpy's pickling of 34 documents a shard.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

_ALIGN = 8      # each array starts at a multiple of 8 bytes of the buffer (aligned views)


@dataclass
class WindowFeatures:
    """One document's windows for one query (plain arrays: a value that crosses processes):
    character spans, terms per window, the counts of the query's terms (columns in
    `PassageFinder.term_list` order), each vector kind's similarity."""
    spans: np.ndarray          # (m, 2) int64
    lengths: np.ndarray        # (m,) int64
    tf: np.ndarray             # (m, terms) uint16 (uint32 where a count passes 65,535)
    vec: dict                  # {kind: (m,) float64, nan where the kind has no vector}
    # where the query's terms occur in the document's term stream, their columns, the stream's length
    # (window_scales places windows of any size over them)
    at: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    at_col: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint16))
    n_terms: int = 0

    def arrays(self) -> list:
        return [self.spans, self.lengths, self.tf, self.at, self.at_col, *self.vec.values()]


class FeatureMap(dict):
    """{docno: WindowFeatures}: a dict in the process that made it, pickled as one byte buffer
    and each array's dtype, shape and place in it (read back as views of one writable copy)."""

    def __reduce__(self):
        specs, parts, at = [], [], 0
        for d, f in self.items():
            shapes = []
            for a in f.arrays():
                a = np.ascontiguousarray(a)
                shapes.append((a.dtype.str, a.shape, at))
                raw = a.reshape(-1).view(np.uint8)
                pad = -len(raw) % _ALIGN
                parts.extend((raw, np.zeros(pad, np.uint8)) if pad else (raw,))
                at += len(raw) + pad
            specs.append((d, tuple(f.vec), f.n_terms, tuple(shapes)))
        blob = np.concatenate(parts) if parts else np.zeros(0, np.uint8)
        return _unpack, (specs, blob.tobytes())


def _unpack(specs: list, blob: bytes) -> FeatureMap:
    buf = np.frombuffer(blob, dtype=np.uint8).copy()       # writable, as the arrays were
    out = FeatureMap()
    for d, kinds, n_terms, shapes in specs:
        arrays = []
        for dtype, shape, at in shapes:      # a view at its place (np.prod alone cost 2 us an array)
            arrays.append(np.ndarray(shape, np.dtype(dtype), buf, at))
        spans, lengths, tf, at_, at_col, *vecs = arrays
        out[d] = WindowFeatures(spans, lengths, tf, dict(zip(kinds, vecs)), at_, at_col, n_terms)
    return out
