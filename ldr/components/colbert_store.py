"""The late-interaction part of a segment: every document's token vectors, int8 with a scale each.

Files (`segments/seg-N/colbert/`): `codes.i8` (n_vectors × dim int8, row-major), `scales.f16` (one
float16 per vector: v ≈ code · scale), `doc_indptr.npy` (int64, docs + 1: document d owns vectors
indptr[d]:indptr[d+1]), `windows.npy` (int64, one row per window the model saw: [vectors it
kept, first character, end character] in the document's text, (-1, -1) when unknown) with
`win_indptr.npy` (docs + 1), so a hit can show the windows whose tokens won the MaxSim. Raw
arrays, read memory-mapped: nothing in them can run code. A vector costs dim + 2 bytes (130 for
128 dimensions; pooled ×2, ~65 bytes per document token); a window 24 bytes per ~500 tokens.

MaxSim is exact over the stored vectors: for each query token the best dot product with one of
the document's vectors, summed. Brute force over a segment reads its vectors once per query in
blocks, so its cost grows with the corpus: it suits the indexes ldr is built for (thousands of
long documents); past that, the colbert leg is best used to rescore the other legs' candidates.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .. import npy
from ..encode.pipeline import BatchedWriter
from ..errors import IndexFormatError

BLOCK = 1 << 16          # vectors dequantised at a time when scoring a whole segment


def quantise(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(int8 codes, float16 scales) with v ≈ codes · scale per row."""
    scale = np.abs(v).max(axis=1) / 127.0
    scale = np.where(scale > 0, scale, 1.0).astype(np.float16)
    codes = np.clip(np.rint(v / scale.astype(np.float32)[:, None]), -127, 127).astype(np.int8)
    return codes, scale


class ColbertWriter(BatchedWriter):
    def __init__(self, path: Path, encoder, dim: int | None, pipeline=None, docs_per_batch: int = 8):
        # few documents per batch: a long document alone is thousands of token vectors
        super().__init__(docs_per_batch, chars_per_batch=1 << 20, pipeline=pipeline, encoder=encoder)
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self._codes = open(self.path / "codes.i8", "wb")
        self._scales = open(self.path / "scales.f16", "wb")
        self._counts: list[int] = []
        self._windows: list[np.ndarray] = []     # per document, (m, 3)
        self._dim = dim

    def _prepare_batch(self, docnos, texts, body_starts):
        job = self.encoder.prepare_documents(texts, spans=True)
        self.tokens += sum(map(len, job[1]))
        return job, body_starts

    def _write_prepared(self, prepared) -> None:
        job, body_starts = prepared
        vecs, wins = self.encoder.finish_documents(job, self._count)
        for v, w, shift in zip(vecs, wins, body_starts):
            codes, scales = quantise(v)
            self._codes.write(codes.tobytes())
            self._scales.write(scales.tobytes())
            self._counts.append(len(v))
            # characters of the document's text (its body), not of "title\n" + body
            w[:, 1:] = np.where(w[:, 1:] >= 0, np.maximum(w[:, 1:] - shift, 0), -1)
            self._windows.append(w)
            self._dim = v.shape[1]

    def write_rows(self, codes: np.ndarray, scales: np.ndarray, counts: list[int],
                   windows: list[np.ndarray]) -> None:
        """Copy already encoded documents (merges), with their windows."""
        self._codes.write(np.ascontiguousarray(codes, dtype=np.int8).tobytes())
        self._scales.write(np.ascontiguousarray(scales, dtype=np.float16).tobytes())
        self._counts.extend(counts)
        self._windows.extend(windows)

    def abort(self) -> None:
        self._codes.close()
        self._scales.close()

    def close(self) -> dict:
        self._finish()
        self._codes.close()
        self._scales.close()
        indptr = np.zeros(len(self._counts) + 1, dtype=np.int64)
        np.cumsum(self._counts, out=indptr[1:])
        np.save(self.path / "doc_indptr.npy", indptr)
        win_indptr = np.zeros(len(self._windows) + 1, dtype=np.int64)
        np.cumsum([len(w) for w in self._windows], out=win_indptr[1:])
        np.save(self.path / "windows.npy", np.concatenate(self._windows) if self._windows
                else np.zeros((0, 3), np.int64))
        np.save(self.path / "win_indptr.npy", win_indptr)
        # no documents (a shard none was routed to): the model is loaded so that it describes itself
        dim = self._dim if self._dim is not None else (self.encoder.dim if self.loaded or not self._counts else 0)
        return {"path": self.path.name, "vectors": int(indptr[-1]), "windows": int(win_indptr[-1]), "dim": int(dim),
                **({"model": self.encoder.describe()} if self.loaded else {})}


class ColbertPart:
    """One segment's token vectors, memory-mapped."""

    def __init__(self, path: Path, docs: int, dim: int):
        self.path, self.dim = Path(path), dim
        try:
            self.indptr = npy.load(self.path / "doc_indptr.npy", mmap_mode="r")
            n = int(self.indptr[-1]) if len(self.indptr) else 0
            self.scales = np.memmap(self.path / "scales.f16", dtype=np.float16, mode="r", shape=(n,)) if n else \
                np.zeros(0, np.float16)
            self.codes = np.memmap(self.path / "codes.i8", dtype=np.int8, mode="r", shape=(n, dim)) if n else \
                np.zeros((0, dim), np.int8)
        except (OSError, ValueError) as e:
            raise IndexFormatError(f"{self.path} is damaged ({e}); run `ldr check` and rebuild the index") from None
        if len(self.indptr) != docs + 1:
            raise IndexFormatError(f"{self.path} has {len(self.indptr) - 1} documents, the manifest says {docs}; "
                                   "run `ldr check` and rebuild the index")
        self.windows = self.win_indptr = None     # segments written before windows were kept have none
        if (self.path / "win_indptr.npy").is_file():
            try:
                self.win_indptr = npy.load(self.path / "win_indptr.npy", mmap_mode="r")
                self.windows = npy.load(self.path / "windows.npy", mmap_mode="r")
            except (OSError, ValueError) as e:
                raise IndexFormatError(f"{self.path} is damaged ({e}); run `ldr check` and rebuild the index") from None
            if (len(self.win_indptr) != docs + 1 or self.windows.ndim != 2 or self.windows.shape[1] != 3
                    or int(self.win_indptr[-1]) != len(self.windows)):
                raise IndexFormatError(f"{self.path}: its windows do not match its documents; "
                                       "run `ldr check` and rebuild the index")

    def doc_windows(self, row: int) -> np.ndarray:
        """The document's windows (m, 3): [vectors, first character, end character]; one window of
        unknown characters when the segment kept none."""
        if self.windows is None:
            return np.array([[int(self.indptr[row + 1] - self.indptr[row]), -1, -1]], dtype=np.int64)
        return np.asarray(self.windows[int(self.win_indptr[row]):int(self.win_indptr[row + 1])])

    def passage_scores(self, q: np.ndarray, row: int) -> tuple[np.ndarray, np.ndarray | None]:
        """(MaxSim of the query with each of the document's windows alone, the windows' character
        spans or None when unknown): the windows whose tokens matched the query best."""
        a, b = int(self.indptr[row]), int(self.indptr[row + 1])
        w = self.doc_windows(row)
        keep = w[:, 0] > 0                    # a window that kept no vector (an empty text) scores nothing
        if b <= a or not keep.any() or int(w[:, 0].sum()) != b - a:
            return np.zeros(0), None
        sims = self._sims(q, a, b, np.empty((b - a, self.dim), dtype=np.float32))
        starts = np.r_[0, np.cumsum(w[:, 0])[:-1]][keep]
        scores = np.maximum.reduceat(sims, starts, axis=0).sum(axis=1).astype(np.float64)
        spans = w[keep, 1:]
        return scores, (None if (spans < 0).any() else spans)

    def vectors(self, row: int) -> np.ndarray:
        a, b = int(self.indptr[row]), int(self.indptr[row + 1])
        return self.codes[a:b].astype(np.float32) * self.scales[a:b].astype(np.float32)[:, None]

    def _sims(self, q: np.ndarray, a: int, b: int, buf: np.ndarray) -> np.ndarray:
        """(b - a, nq) dot products of vectors a..b with the query: the int8 codes are cast into
        a reused buffer and each row scaled after the product (nq columns, not dim)."""
        blk = buf[: b - a]
        blk[...] = self.codes[a:b]
        sims = blk @ q.T
        sims *= self.scales[a:b].astype(np.float32)[:, None]
        return sims

    def maxsim(self, q: np.ndarray, rows) -> np.ndarray:
        """MaxSim of query vectors `q` (nq, dim) with each listed document (only their vectors are read)."""
        rows = np.asarray(rows, dtype=np.int64)
        starts, ends = np.asarray(self.indptr)[rows], np.asarray(self.indptr)[rows + 1]
        out = np.zeros(len(rows), dtype=np.float32)
        buf = np.empty((min(BLOCK, int((ends - starts).max(initial=1))), self.dim), dtype=np.float32)
        for i, (a, b) in enumerate(zip(starts.tolist(), ends.tolist())):
            best = np.full(len(q), -np.inf, dtype=np.float32)
            for c in range(a, b, BLOCK):
                best = np.maximum(best, self._sims(q, c, min(c + BLOCK, b), buf).max(axis=0))
            out[i] = best.sum() if b > a else 0.0
        return out

    def maxsim_all(self, q: np.ndarray) -> np.ndarray:
        """MaxSim with every document of the segment, reading the vectors in blocks."""
        n_docs = len(self.indptr) - 1
        out = np.zeros(n_docs, dtype=np.float32)
        best = np.full((n_docs, len(q)), -np.inf, dtype=np.float32)   # per document, per query token
        owner = np.repeat(np.arange(n_docs), np.diff(self.indptr))
        total = int(self.indptr[-1]) if n_docs else 0
        buf = np.empty((min(BLOCK, max(total, 1)), self.dim), dtype=np.float32)
        for a in range(0, total, BLOCK):
            b = min(a + BLOCK, total)
            sims = self._sims(q, a, b, buf)                    # (block, nq)
            own = owner[a:b]
            starts = np.flatnonzero(np.r_[True, own[1:] != own[:-1]])
            block_best = np.maximum.reduceat(sims, starts, axis=0)
            docs = own[starts]
            best[docs] = np.maximum(best[docs], block_best)
        has = np.diff(self.indptr) > 0
        out[has] = best[has].sum(axis=1)
        return out


def check_part(path: Path, docs: int, dim: int, vectors: int, windows: int | None = None) -> list[str]:
    """Structure of a segment's colbert part: sizes agree, offsets ordered, scales finite."""
    out = []
    try:
        indptr = npy.load(path / "doc_indptr.npy", mmap_mode="r")
    except (OSError, ValueError) as e:
        return [f"colbert offsets unreadable ({e})"]
    if len(indptr) != docs + 1 or (len(indptr) and (indptr[0] != 0 or np.any(np.diff(indptr) < 0))):
        out.append("colbert document offsets are out of order or of the wrong length")
        return out
    n = int(indptr[-1])
    if n != vectors:
        out.append(f"colbert holds {n} vectors, the manifest says {vectors}")
    for name, size in (("codes.i8", n * dim), ("scales.f16", 2 * n)):
        f = path / name
        if not f.is_file() or f.stat().st_size != size:
            out.append(f"colbert {name} has {f.stat().st_size if f.is_file() else 'no'} bytes, expected {size}")
    if not out and n:
        scales = np.memmap(path / "scales.f16", dtype=np.float16, mode="r", shape=(n,))
        if not np.all(np.isfinite(scales)) or np.any(scales <= 0):
            out.append("colbert scales are not finite positive numbers")
    if windows is not None:
        out += _check_windows(path, indptr, windows)
    return out


def _check_windows(path: Path, indptr: np.ndarray, windows: int) -> list[str]:
    """The windows of every document account for exactly its vectors, with ordered spans."""
    try:
        wp = npy.load(path / "win_indptr.npy")
        w = npy.load(path / "windows.npy")
    except (OSError, ValueError) as e:
        return [f"colbert windows unreadable ({e})"]
    if (wp.ndim != 1 or len(wp) != len(indptr) or w.ndim != 2 or w.shape != (windows, 3) or w.dtype.kind != "i"
            or wp[0] != 0 or np.any(np.diff(wp) < 0) or int(wp[-1]) != windows):
        return [f"colbert windows have shape {w.shape}, expected ({windows}, 3) with ordered offsets"]
    owner = np.repeat(np.arange(len(wp) - 1), np.diff(wp))
    per_doc = np.bincount(owner, weights=w[:, 0], minlength=len(wp) - 1).astype(np.int64)
    if np.any(w[:, 0] < 0) or not np.array_equal(per_doc, np.diff(indptr)):
        return ["colbert windows do not account for each document's vectors"]
    if np.any(w[:, 1] > w[:, 2]) or np.any((w[:, 1] < 0) != (w[:, 2] < 0)):
        return ["colbert window character spans are out of order"]
    return []
