"""A segment's document texts, one zstd frame per document, read a document at a time.

The window stage reads the texts of its 50 candidates at every search. From the Parquet
docstore's 64-row groups that meant decoding 50 groups (3,200 texts) for 50: ~8 ms of a 40 ms
search at a million documents (bench/README.md). Here a text is one `pread` of its own frame and
one decompression (~10 µs for a page of text), so a search reads only what it shows or scores.
Each thread compresses and decompresses with contexts it keeps (python-zstandard): Arrow's codec
made a new zstd context at every call, 8 of a short text's 8.5 µs to read and 9 of its 10 µs to
write, ~2% of a Ray shard replica's CPU (perf, 2026-11-30).

    docstore.texts.zst   the frames, in row order
    docstore.texts.npy   (rows, 4) int64: start, end of the frame, the text's UTF-8 length, CRC-32
                         of the frame (a flipped byte is an error on read, never different text)

Segments written before this file exist keep their texts in the Parquet file and are read there.
"""
from __future__ import annotations

import os
import threading
import zlib
from array import array
from pathlib import Path

import numpy as np
import zstandard

from .. import npy

FRAMES = "docstore.texts.zst"
INDEX = "docstore.texts.npy"
LEVEL = 3                  # zstd's default level: a long text compresses ~3x, decompresses at GB/s


class TextsWriter:
    """Appends each document's text as its own frame; `close` writes the index beside them."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self._fh = open(self.root / FRAMES, "wb")
        self._zstd = zstandard.ZstdCompressor(level=LEVEL)
        self._rows = array("q")       # start, end, length, crc per document: 32 bytes, not a tuple each
        self._at = 0

    def add(self, text: str) -> None:
        raw = text.encode("utf-8")
        frame = self._zstd.compress(raw) if raw else b""
        self._fh.write(frame)
        self._rows.extend((self._at, self._at + len(frame), len(raw), zlib.crc32(frame)))
        self._at += len(frame)

    def close(self) -> None:
        self._fh.close()
        index = np.frombuffer(self._rows, dtype=np.int64).reshape(-1, 4)
        with open(self.root / INDEX, "wb") as fh:
            np.save(fh, index, allow_pickle=False)

    def abort(self) -> None:
        self._fh.close()


class Texts:
    """The read side: the index mapped (an open reads nothing of it), each text read on demand.
    Both files are read without read-ahead: a search from disk reads the pages of its candidates,
    not the ~128 KB around each (+30 MB for 50 texts at a million documents, measured); a run of
    consecutive rows (a merge, `ldr check`) is one read. Thread-safe: `os.pread` keeps no file
    position and each thread decompresses with its own context."""

    def __init__(self, root: Path, rows: int):
        root = Path(root)
        self.path = root / FRAMES
        self.index = _mapped(root / INDEX, rows)
        self._fh = open(self.path, "rb")
        size = self._fh.seek(0, 2)
        if rows and int(self.index[-1, 1]) != size:
            raise ValueError(f"{FRAMES} has {size} bytes, its index ends at {int(self.index[-1, 1])}")
        if hasattr(os, "posix_fadvise"):
            os.posix_fadvise(self._fh.fileno(), 0, 0, os.POSIX_FADV_RANDOM)

    def get(self, rows) -> list[str]:
        """The texts of `rows`, in that order."""
        out, fd = [], self._fh.fileno()
        for r in rows:
            a, e, n, crc = self.index[int(r)].tolist()      # the index row read once
            if not 0 <= a <= e or e - a > (1 << 31):
                raise ValueError(f"row {r}'s frame [{a}, {e}) is not a frame")
            out.append(self._text(r, os.pread(fd, e - a, a) if e > a else b"", e - a, n, crc))
        return out

    def span(self, a: int, b: int) -> list[str]:
        """The texts of rows a..b-1, read with one `pread`."""
        if b <= a:
            return []
        rows = self.index[a:b].tolist()
        start, end = rows[0][0], rows[-1][1]
        if not 0 <= start <= end or end - start > (1 << 31):
            raise ValueError(f"rows {a}..{b - 1} have no frames [{start}, {end})")
        block = os.pread(self._fh.fileno(), end - start, start)
        out = []
        for r, (f0, f1, n, crc) in enumerate(rows, start=a):
            if not start <= f0 <= f1 <= start + len(block):
                raise ValueError(f"row {r}'s frame is outside the rows' block")
            out.append(self._text(r, block[f0 - start:f1 - start], f1 - f0, n, crc))
        return out

    def _text(self, r: int, frame: bytes, size: int, n: int, crc: int) -> str:
        if len(frame) != size or zlib.crc32(frame) != crc:
            raise ValueError(f"{FRAMES}: row {r}'s text does not match its checksum")
        if not n:
            return ""
        try:
            raw = _decompressor().decompress(frame, max_output_size=n)
        except zstandard.ZstdError as e:
            raise ValueError(f"{FRAMES}: row {r}'s frame does not decompress ({e})") from None
        if len(raw) != n:
            raise ValueError(f"{FRAMES}: row {r}'s text is {len(raw)} bytes, its index says {n}")
        return raw.decode("utf-8")

    def verify(self, block: int = 32 << 20) -> None:
        """Read every text (checksums and decompression): what `ldr check` proves of the Parquet
        pages; rows read in runs of about `block` bytes of frames (a long text is a run alone)."""
        ends = np.asarray(self.index[:, 1])
        a = 0
        while a < len(ends):
            b = max(a + 1, int(np.searchsorted(ends, int(self.index[a, 0]) + block, side="right")))
            self.span(a, min(b, len(ends)))
            a = b


_local = threading.local()


def _decompressor() -> "zstandard.ZstdDecompressor":
    """This thread's decompression context (one is not to be shared by threads)."""
    got = getattr(_local, "zstd", None)
    if got is None:
        got = _local.zstd = zstandard.ZstdDecompressor()
    return got


def _mapped(path: Path, rows: int) -> np.ndarray:
    """The (rows, 4) int64 index, mapped with read-ahead off (np.load would map it with it on)."""
    import mmap

    with open(path, "rb") as fh:
        shape, fortran, dtype = npy.header(fh)
        offset = fh.tell()
        if dtype != np.int64 or fortran or shape != (rows, 4):
            raise ValueError(f"{INDEX} holds {shape} {dtype}, not ({rows}, 4) int64")
        if fh.seek(0, 2) != offset + rows * 32:
            raise ValueError(f"{INDEX} has {fh.tell()} bytes, not {offset + rows * 32}")
        mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    if hasattr(mm, "madvise") and hasattr(mmap, "MADV_RANDOM"):
        mm.madvise(mmap.MADV_RANDOM)
    return np.frombuffer(mm, dtype=np.int64, count=rows * 4, offset=offset).reshape(rows, 4)
