"""A compressed dense part's exact vectors: raw float32 files, rows in order, memory-mapped.

A part written from documents has one file, `vectors.f32`. A merge hard-links the files of every
source that lost no row (files are never modified, so two segments may share one) and writes the
other sources' live rows into one new file: adding 1% to a large segment and merging copies 1% of
the vectors, not all of them. The part's entry lists its files and their rows (`exact`); past
MAX_FILES a merge writes them into one file again.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np

from ..errors import IndexFormatError

FILE = "vectors.f32"
MAX_FILES = 16
CHUNK = 65536
LINK_MIN = CHUNK        # rows: a smaller whole source is copied (cheap) rather than kept as a file of its own


def files_of(entry: dict) -> list[tuple[str, int]]:
    """[(file name, rows)] of a part entry (a part of one file names none)."""
    return [(str(f), int(n)) for f, n in entry.get("exact") or [(FILE, entry.get("vectors", 0))]]


class ExactVectors:
    """Rows of one or more mapped files as one array: slices and integer row arrays."""

    def __init__(self, folder: Path, files: list[tuple[str, int]], d: int):
        self.maps, self.d = [], d
        for name, n in files:
            file = Path(folder) / name
            if Path(name).name != name or not name.endswith(".f32"):
                raise IndexFormatError(f"{folder}: {name!r} is not a vector file of ldr's")
            size = file.stat().st_size if file.is_file() else -1
            if size != n * d * 4:
                raise IndexFormatError(f"the dense vectors {file} hold {size} bytes, the manifest says {n} x {d} "
                                       "float32; run `ldr check` and rebuild the index")
            self.maps.append(np.memmap(file, dtype=np.float32, mode="r", shape=(n, d)) if n else
                             np.zeros((0, d), np.float32))
        self.bounds = np.cumsum([0] + [len(m) for m in self.maps])
        self.shape = (int(self.bounds[-1]), d)

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key) -> np.ndarray:
        if isinstance(key, slice):
            start, stop, _ = key.indices(self.shape[0])
            key = np.arange(start, stop)
            if len(self.maps) == 1:
                return np.asarray(self.maps[0][start:stop])
        rows = np.asarray(key, dtype=np.int64)
        if len(self.maps) == 1:
            return np.asarray(self.maps[0][rows])
        out = np.empty((len(rows), self.d), np.float32)
        which = np.searchsorted(self.bounds, rows, side="right") - 1
        for f in np.unique(which):
            sel = which == f
            out[sel] = self.maps[f][rows[sel] - self.bounds[f]]
        return out


def write(file: Path, vectors) -> int:
    """Rows of `vectors` (anything sliceable) into a new raw file; returns the rows written."""
    with open(file, "wb") as fh:
        for start in range(0, len(vectors), CHUNK):
            fh.write(np.ascontiguousarray(vectors[start:start + CHUNK], dtype=np.float32).tobytes())
    return len(vectors)


def link(src: Path, dst: Path) -> None:
    """A hard link (the same immutable file); a copy where the two are on different filesystems."""
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def merge_files(out: Path, sources: list[tuple], rows_of) -> list[tuple[str, int]]:
    """The merged part's files: [(source folder, its files, keep mask, its vectors)] in row order.
    A source that keeps every row is linked; the others' live rows (`rows_of(vectors, keep)`) go
    into new files. Returns [(file name, rows)]."""
    out_files: list[tuple[str, int]] = []
    pending: list = []

    def flush():
        if pending:
            name = f"vectors-{len(out_files)}.f32"
            out_files.append((name, write(out / name, rows_of(list(pending)))))
            pending.clear()

    def whole(files, keep):
        return bool(files) and keep.all() and len(keep) >= LINK_MIN

    linkable = sum(len(f) for _, f, keep, _ in sources if whole(f, keep)) + len(sources) <= MAX_FILES
    for folder, files, keep, vecs in sources:
        if linkable and whole(files, keep):
            flush()
            for name, n in files:
                new = f"vectors-{len(out_files)}.f32"
                link(Path(folder) / name, out / new)
                out_files.append((new, n))
        else:
            pending.append((vecs, keep))
    flush()
    return out_files
