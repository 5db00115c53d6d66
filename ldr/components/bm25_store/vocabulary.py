"""A native BM25 segment's vocabulary: term i is row i of an Arrow IPC file, and the term ids sorted by
term sit beside it, so that opening a segment reads two flat files instead of parsing a JSON object
(0.9 s of a cold search at a million terms) and a query finds its few terms by binary search.
Segments written before these files keep their vocab.json, read as before.
"""
from __future__ import annotations

from pathlib import Path

import threading

import numpy as np
import pyarrow as pa

from ... import npy

TERMS, ORDER, LEGACY = "vocab.arrow", "vocab_order.npy", "vocab.json"
_SCHEMA = pa.schema([("term", pa.string())])
_UNSEEN = object()
SEEN = 1 << 16           # looked-up terms a segment keeps (a new term reads Arrow strings to be checked)
DICT_TERMS = 1 << 21     # a vocabulary made a dict at most this large (~200 MB of Python strings)
PREFIX = 16              # bytes of each term the sorted prefix table holds (16 MB a million terms)
TABLE_TERMS = 1 << 22    # a larger vocabulary is searched without one (its table would pass 64 MB)


def write_vocabulary(folder: Path, terms: list[str]) -> None:
    """`terms` in id order."""
    import pyarrow.compute as pc

    arr = pa.array(terms, pa.string())
    with pa.OSFile(str(folder / TERMS), "wb") as sink, pa.ipc.new_file(sink, _SCHEMA) as w:
        w.write_table(pa.table({"term": arr}, schema=_SCHEMA))
    # Arrow sorts UTF-8 by bytes, which is code-point order: the order Python compares str in
    np.save(folder / ORDER, pc.sort_indices(arr).to_numpy().astype(np.int64))


class Vocabulary:
    """Term → id of one segment (`get`, `len`, `items`), from either layout."""

    def __init__(self, folder: Path):
        folder = Path(folder)
        self._dict: dict[str, int] | None = None
        self._seen: dict[str, int | None] = {}   # terms looked up before (queries repeat their terms)
        self._searched = 0                       # terms get_many looked up in the sorted terms
        self._prefixes: np.ndarray | None = None     # the sorted terms' first bytes (_prefix_table)
        self._lock = threading.Lock()
        if not (folder / TERMS).is_file():
            import json
            vocab = json.loads((folder / LEGACY).read_text(encoding="utf-8"))
            if not isinstance(vocab, dict):
                raise ValueError(f"{LEGACY} is not an object")
            self._dict, self._n = vocab, len(vocab)
            return
        # read, not mapped: a file replaced under a live mapping would be a bus error
        with pa.OSFile(str(folder / TERMS), "rb") as fh:
            table = pa.ipc.open_file(fh).read_all()
        if table.schema != _SCHEMA:
            raise ValueError(f"{TERMS} has columns {table.schema.names}")
        self._terms = table.column("term").combine_chunks()
        self._order = npy.load(folder / ORDER)
        self._n = len(self._terms)
        if self._order.shape != (self._n,) or self._order.dtype.kind not in "iu" or \
                (self._n and (self._order.min() < 0 or self._order.max() >= self._n)):
            raise ValueError(f"{ORDER} does not index {TERMS}")

    def __len__(self) -> int:
        return self._n

    def get(self, term: str) -> int | None:
        if self._dict is not None:
            return self._dict.get(term)
        seen = self._seen
        found = seen.get(term, _UNSEEN)      # one read: another thread may clear `seen` meanwhile
        if found is not _UNSEEN:
            return found
        if len(seen) >= SEEN:
            seen.clear()
        found = seen[term] = self._search(term)
        return found

    def get_many(self, terms: list[str]) -> list[int | None]:
        """get() of each term: those not looked up before in one binary search over all of them
        (an Arrow take a step, instead of ~20 string reads a term: 65 us a term). Thread-safe: the
        searches of many threads share a segment's vocabulary."""
        with self._lock:
            if self._dict is not None:
                return [self._dict.get(t) for t in terms]
            seen = self._seen
            want = list({t for t in terms if t not in seen})
            self._searched += len(want)
            if self._searched * max(1, self._n.bit_length()) >= self._n and self._n <= DICT_TERMS:
                # as many terms looked up as a binary search of each reads in all: a dict from now on
                self._dict = dict(zip(self._terms.to_pylist(), range(self._n)))
                return [self._dict.get(t) for t in terms]
            found = dict(zip(want, self._search_many(want))) if want else {}
            out = [found[t] if t in found else seen[t] for t in terms]
            if len(seen) + len(found) > SEEN:
                seen.clear()
            seen.update(found)
            return out

    def _search_many(self, keys: list[str]) -> list[int | None]:
        """The id of each of `keys` (None: not a term here): each key's first PREFIX bytes found in
        the sorted prefix table at once (np.searchsorted), then checked against the term itself;
        keys whose prefix several terms share (long ones), or every key where the vocabulary is too
        large for a table, by binary search within those terms."""
        m = len(keys)
        out: list[int | None] = [None] * m
        if self._prefixes is None and self._n <= TABLE_TERMS:
            self._prefixes = _prefix_table(self._terms, self._order)
        if self._prefixes is None:
            shared, lo, hi = np.arange(m), np.zeros(m, dtype=np.int64), np.full(m, self._n, dtype=np.int64)
        else:
            want = np.array([k.encode("utf-8", "replace")[:PREFIX] for k in keys], dtype=f"S{PREFIX}")
            lo, hi = np.searchsorted(self._prefixes, want, "left"), np.searchsorted(self._prefixes, want, "right")
            one = np.flatnonzero(hi - lo == 1)
            for j, term, at in zip(one.tolist(), self._take(lo[one]), self._order[lo[one]].tolist()):
                if term == keys[j]:
                    out[j] = at
            shared = np.flatnonzero(hi - lo > 1)
        if len(shared):
            lo, hi = lo[shared], hi[shared]
            while True:
                idx = np.flatnonzero(lo < hi)
                if not len(idx):
                    break
                mid = (lo[idx] + hi[idx]) // 2
                less = np.fromiter((a < keys[shared[j]] for a, j in zip(self._take(mid), idx.tolist())), dtype=bool,
                                   count=len(idx))
                lo[idx] = np.where(less, mid + 1, lo[idx])
                hi[idx] = np.where(less, hi[idx], mid)
            inside = np.flatnonzero(lo < self._n)
            for j, term, at in zip(inside.tolist(), self._take(lo[inside]), self._order[lo[inside]].tolist()):
                if term == keys[shared[j]]:
                    out[shared[j]] = at
        return out

    def _take(self, ranks: np.ndarray) -> list[str]:
        """The terms at these places of the sorted order, in one Arrow call."""
        idx = np.ascontiguousarray(self._order[ranks], dtype=np.int64)
        # from the buffer: pa.array() on a numpy array imports pandas (0.23 s of a cold search)
        return self._terms.take(pa.Array.from_buffers(pa.int64(), len(idx), [None, pa.py_buffer(idx)])).to_pylist()

    def _search(self, term: str) -> int | None:
        terms, order = self._terms, self._order
        lo, hi = 0, self._n
        while lo < hi:          # ~20 steps at a million terms, each one string read
            mid = (lo + hi) // 2
            if terms[int(order[mid])].as_py() < term:
                lo = mid + 1
            else:
                hi = mid
        if lo < self._n and terms[int(order[lo])].as_py() == term:
            return int(order[lo])
        return None

    def items(self):
        """(term, id) pairs, in id order."""
        if self._dict is not None:
            return self._dict.items()
        return zip(self._terms.to_pylist(), range(self._n))


def _prefix_table(terms: pa.Array, order: np.ndarray) -> np.ndarray:
    """The first PREFIX bytes of each term in sorted order, NUL-padded, as one fixed-width bytes
    array (numpy compares those bytewise, the order the terms are sorted in): read from the Arrow
    buffers a byte column at a time and put in order by numpy, with no Python object a term and no
    Arrow kernel (a first Arrow take of the vocabulary cost 23 ms of a first query)."""
    n = len(terms)
    wide = pa.types.is_large_string(terms.type)
    _, offsets, data = terms.buffers()
    offs = np.frombuffer(offsets, dtype=np.int64 if wide else np.int32, count=n + 1,
                         offset=(8 if wide else 4) * terms.offset).astype(np.int64)
    raw = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, np.uint8)
    starts, lengths = offs[:-1], np.diff(offs)
    out = np.zeros((n, PREFIX), dtype=np.uint8)
    for c in range(PREFIX):
        rows = np.flatnonzero(lengths > c)
        if not len(rows):
            break
        out[rows, c] = raw[starts[rows] + c]
    return out[order].view(f"S{PREFIX}").reshape(n)
