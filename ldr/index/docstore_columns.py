"""A docstore's columns as a search reads them: strings made Python strings only when read,
integers straight from Arrow's buffers, and the small columns a hit shows (metadata, source,
path, root, stamp) held in memory where they are small."""
from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

HELD_BYTES = 4 << 20       # a docstore whose small columns decode to at most this keeps them once read


def arrow_rows(rows) -> pa.Array:
    """Row numbers as an Arrow index for `take`, from numpy's buffer: pa.array() on a list or a
    numpy array imports pandas (0.23 s of a cold search)."""
    idx = np.ascontiguousarray(rows, dtype=np.int64)
    return pa.Array.from_buffers(pa.int64(), len(idx), [None, pa.py_buffer(idx)])


def int64s(column) -> np.ndarray:
    """An int64 column as numpy, straight from its buffers: pyarrow's to_numpy imports pandas,
    which alone costs a cold `ldr search` ~0.3 s."""
    if column.null_count:
        raise ValueError(f"{column.null_count} missing values in an integer column")
    parts = [np.frombuffer(c.buffers()[1], dtype=np.int64)[c.offset:c.offset + len(c)] for c in column.chunks
             if len(c)]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


class StringColumn(Sequence):
    """A docstore column of strings, each made a Python string when it is read: a million ids and
    titles as Python strings cost 0.17 s and ~150 MB at open, and a search reads a few dozen."""

    def __init__(self, array: pa.Array):
        self.array = array

    def __len__(self) -> int:
        return len(self.array)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return self.array[i].to_pylist()
        return self.array[int(i)].as_py()

    def __iter__(self):
        return iter(self.array.to_pylist())

    def take(self, rows: np.ndarray) -> list:
        """The strings at `rows`, in one Arrow call (20x reading them one by one)."""
        return self.array.take(arrow_rows(rows)).to_pylist()


class SmallColumns:
    """The columns a hit shows besides its id and title (the user's metadata, ldr's source, path,
    root and stamp), held in memory after their first read where they decode to at most HELD_BYTES
    (the Parquet file says how much before anything is read): a search's fetch read their row
    groups each time, 0.6-0.75 ms of a 21-30 ms search on 35 and 162 meetings. A larger docstore's
    are read by row group, as before."""

    def __init__(self, pf: pq.ParquetFile, names: list[str]):
        self.names = names
        md, leaves = pf.metadata, [pf.metadata.schema.column(i).name for i in range(pf.metadata.num_columns)]
        size = sum(md.row_group(g).column(leaves.index(n)).total_uncompressed_size
                   for g in range(md.num_row_groups) for n in names if n in leaves)
        self.fits = bool(names) and size <= HELD_BYTES
        self._held: dict | None = None
        self._lock = threading.Lock()

    def take(self, rows: list[int], read_all) -> dict[str, list] | None:
        """The columns at `rows` from memory (`read_all()`: the whole columns as a table, the first
        time); None where the docstore's are too large to hold."""
        if not self.fits:
            return None
        with self._lock:
            if self._held is None:
                table = read_all()
                self._held = {n: table.column(n).combine_chunks() for n in self.names}
        take = arrow_rows(rows)
        return {n: self._held[n].take(take).to_pylist() for n in self.names}
