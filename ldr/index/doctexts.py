"""A segment's document texts, one zstd frame per document, read a document at a time.

The window stage reads the texts of its 50 candidates at every search. From the Parquet
docstore's 64-row groups that meant decoding 50 groups (3,200 texts) for 50: ~8 ms of a 40 ms
search at a million documents (bench/README.md). Here a text is one `pread` of its own frame and
one decompression (~10 µs for a page of text), so a search reads only what it shows or scores.

    docstore.texts.zst   the frames, in row order
    docstore.texts.npy   (rows, 4) int64: start, end of the frame, the text's UTF-8 length, CRC-32
                         of the frame (a flipped byte is an error on read, never different text)

Segments written before this file exist keep their texts in the Parquet file and are read there.
"""
from __future__ import annotations

import zlib
from array import array
from pathlib import Path

import numpy as np
import pyarrow as pa

FRAMES = "docstore.texts.zst"
INDEX = "docstore.texts.npy"
LEVEL = 3                  # zstd's default level: a long text compresses ~3x, decompresses at GB/s


class TextsWriter:
    """Appends each document's text as its own frame; `close` writes the index beside them."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self._fh = open(self.root / FRAMES, "wb")
        self._codec = pa.Codec("zstd", compression_level=LEVEL)
        self._rows = array("q")       # start, end, length, crc per document: 32 bytes, not a tuple each
        self._at = 0

    def add(self, text: str) -> None:
        raw = text.encode("utf-8")
        frame = self._codec.compress(raw, asbytes=True) if raw else b""
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
    Thread-safe: `os.pread` keeps no file position and each decompression has its own context."""

    def __init__(self, root: Path, rows: int):
        root = Path(root)
        self.path = root / FRAMES
        self.index = np.load(root / INDEX, mmap_mode="r", allow_pickle=False)
        if self.index.dtype != np.int64 or self.index.shape != (rows, 4):
            raise ValueError(f"{INDEX} has shape {self.index.shape} ({self.index.dtype}), not ({rows}, 4) int64")
        self._fh = open(self.path, "rb")
        size = self._fh.seek(0, 2)
        if rows and int(self.index[-1, 1]) != size:
            raise ValueError(f"{FRAMES} has {size} bytes, its index ends at {int(self.index[-1, 1])}")
        self._codec = pa.Codec("zstd")

    def get(self, rows) -> list[str]:
        """The texts of `rows`, in that order."""
        import os

        out, fd = [], self._fh.fileno()
        for r in rows:
            a, e, n, crc = (int(v) for v in self.index[int(r)])
            if not 0 <= a <= e or e - a > (1 << 31):
                raise ValueError(f"row {r}'s frame [{a}, {e}) is not a frame")
            frame = os.pread(fd, e - a, a) if e > a else b""
            if len(frame) != e - a or zlib.crc32(frame) != crc:
                raise ValueError(f"row {r}'s text does not match its checksum")
            out.append(self._codec.decompress(frame, decompressed_size=n, asbytes=True).decode("utf-8") if n else "")
        return out

    def verify(self, batch: int = 4096) -> None:
        """Read every text (checksums and decompression): what `ldr check` proves of the Parquet pages."""
        for a in range(0, len(self.index), batch):
            self.get(range(a, min(a + batch, len(self.index))))
