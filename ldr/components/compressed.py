"""Compressed passage vectors: IVF codes in RAM, exact vectors on disk (`--faiss rabitq|ivfpq`).

A segment's part holds `ivf.index` (FAISS IVF inverted lists of 1-bit RaBitQ or PQ codes, ids =
the segment's rows; memory-mapped at open) and `vectors.f32` (the exact float32 vectors, raw,
memory-mapped). A search takes the best `max(depth, rescore)` rows by their codes and rescores
them from the exact vectors, so every score ldr reports and fuses is the flat index's.

The coarse centroids (and PQ codebooks) are trained once per index on a sample and kept in
`codebooks/dense-<sha256>.faiss` (an empty trained index, named by its bytes). Segments are
encoded against it, a merge concatenates the sources' lists (deleted rows dropped, ids renumbered)
and trains nothing; a new codebook is trained only when the merged segment outgrows the one it
has (GROW_RETRAIN x the vectors it was trained for: its lists would be too long to scan).
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np

from . import exact_vectors
from ..errors import ConfigError, IndexFormatError
from ..paths import inside

CODEBOOKS = "codebooks"
CODECS = ("rabitq", "ivfpq")
MIN_TRAIN = 1024           # vectors: fewer and a segment is stored flat (exact)
GROW_RETRAIN = 4           # a codebook trained for n vectors serves segments up to 4n (lists ~2x sqrt-law)
DRIFT_RETRAIN = 1.25       # ... whose vectors sit no further from their cells than 1.25x its training sample's
DRIFT_MIN = 1000           # vectors a segment needs before its drift is measured


def n_lists(n: int) -> int:
    """IVF cells for n vectors: ~4 sqrt(n) (FAISS's guideline), at least 39 training vectors each."""
    return int(max(1, min(n // 39, 4 * np.sqrt(max(n, 1)))))


def factory(codec: str, d: int, nlist: int, pq_m: int | None) -> str:
    if codec == "rabitq":
        return f"IVF{nlist},RaBitQ"
    m = pq_m or next(x for x in (d // 8, d // 4, d // 2, d) if x and d % x == 0)
    if d % m:
        raise ConfigError(f"--pq-m {m} must divide the vector dimension {d}")
    return f"IVF{nlist},PQ{m}"


def train(root: Path, vectors: np.ndarray, codec: str, pq_m: int | None = None, seed: int = 0) -> dict:
    """Train a codebook for an index of ~len(vectors) vectors on a sample of them; write it under
    `codebooks/` (temporary file, fsync, rename: a writer killed here leaves an orphan the
    collector removes) and return its record for the manifest."""
    import faiss

    n, d = vectors.shape
    nlist = n_lists(n)
    index = faiss.index_factory(d, factory(codec, d, nlist, pq_m), faiss.METRIC_INNER_PRODUCT)
    ivf = faiss.extract_index_ivf(index)
    ivf.cp.niter, ivf.cp.seed = 10, seed
    pq = faiss.downcast_index(ivf)
    if hasattr(pq, "do_polysemous_training"):     # Hamming-ordered PQ codes ldr never uses: 80 s on 300 vectors
        pq.do_polysemous_training = False
    rng = np.random.default_rng(seed)
    take = np.sort(rng.choice(n, min(n, max(64 * nlist, 20_000)), replace=False))
    sample = np.ascontiguousarray(vectors[take], dtype=np.float32)
    index.train(sample)
    data = faiss.serialize_index(index).tobytes()
    rel = f"{CODEBOOKS}/dense-{hashlib.sha256(data).hexdigest()[:24]}.faiss"
    out = Path(root) / rel
    # the same training gives the same bytes: a file of this name left by a write that never
    # committed is reused when its bytes are these, written again when not (damaged)
    if not out.is_file() or hashlib.sha256(out.read_bytes()).hexdigest()[:24] not in out.name:
        out.parent.mkdir(exist_ok=True)
        part = out.with_name(out.name + ".part")
        with open(part, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(part, out)
    return {"path": rel, "codec": codec, "nlist": nlist, "trained_for": int(n), "residual": residual(index, sample)}


def residual(index, vectors: np.ndarray) -> float:
    """Mean (1 - cosine to the nearest coarse centroid) of `vectors`: how well the cells fit them."""
    import faiss

    ivf = faiss.extract_index_ivf(index)
    sims, _ = ivf.quantizer.search(np.ascontiguousarray(vectors[:20_000], dtype=np.float32), 1)
    return round(float(np.mean(1 - sims[:, 0])), 6) if len(vectors) else 0.0


_LOADED: dict[tuple, object] = {}


def load_codebook(root: Path, record: dict, cached: bool = True):
    """A codebook's trained (empty) index, read once per file (`cached=False`: read again, as
    `ldr check` does); its name is checked against its bytes."""
    import faiss

    path = inside(root, record["path"], "codebook")
    key = (str(path), record["path"])
    if key not in _LOADED or not cached:
        try:
            data = path.read_bytes()
        except OSError as e:
            raise IndexFormatError(f"the dense codebook {record['path']} cannot be read ({e}); "
                                   "run `ldr check` and rebuild the index") from None
        if hashlib.sha256(data).hexdigest()[:24] not in path.name:
            raise IndexFormatError(f"the dense codebook {record['path']} does not match its name (damaged); "
                                   "rebuild the index")
        _LOADED[key] = faiss.deserialize_index(np.frombuffer(data, dtype=np.uint8))
    return _LOADED[key]


def needs_new(record: dict | None, vectors, root: Path | None = None, seed: int = 0) -> bool:
    """Whether a segment of these vectors should get a new codebook: none yet, it outgrew this one
    (GROW_RETRAIN x the vectors it was trained for: its lists too long to scan), or its vectors
    drifted from the cells (the mean residual of 5,000 of them over DRIFT_RETRAIN x the training
    sample's: a corpus of another kind than the one the cells were fitted on)."""
    if not record:
        return True
    n = len(vectors)
    if n > GROW_RETRAIN * record.get("trained_for", 0):
        return True
    if root is None or n < DRIFT_MIN or not record.get("residual"):
        return False          # a few vectors say nothing of drift (a later merge looks at them all)
    take = np.sort(np.random.default_rng(seed).choice(n, min(n, 5000), replace=False))
    return residual(load_codebook(root, record), np.asarray(vectors[take])) > DRIFT_RETRAIN * record["residual"]


def write_part(path: Path, codebook, vectors: np.ndarray, codes: tuple | None = None,
               stream: Path | None = None, written: bool = False) -> None:
    """A segment's compressed part: ivf.index (the codes: `codes` = (lists, ids, codes) made with
    this codebook are copied, else the vectors are encoded) + vectors.f32 (exact, in row order)."""
    import faiss

    if codes is not None:
        index = fill(codebook, *codes)
    else:
        index = faiss.clone_index(codebook)
        for start in range(0, len(vectors), 65536):
            chunk = np.ascontiguousarray(vectors[start:start + 65536], dtype=np.float32)
            index.add_with_ids(chunk, np.arange(start, start + len(chunk), dtype=np.int64))
    faiss.write_index(index, str(Path(path) / "ivf.index"))
    if written:                    # a merge linked and wrote them (exact_vectors.merge_files)
        return
    if stream is not None:         # the writer's raw file already holds these vectors in row order
        os.replace(stream, Path(path) / exact_vectors.FILE)
    else:
        exact_vectors.write(Path(path) / exact_vectors.FILE, vectors)


def encode(codebook, vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(list number, code) of each vector, as the codebook assigns and encodes it."""
    import faiss

    ivf = faiss.extract_index_ivf(codebook)
    cc = ivf.coarse_code_size()
    lists, codes = [], []
    for start in range(0, len(vectors), 65536):
        sa = codebook.sa_encode(np.ascontiguousarray(vectors[start:start + 65536], dtype=np.float32))
        ln = np.zeros(len(sa), np.int64)
        for b in range(cc):                    # FAISS writes list numbers little-endian
            ln |= sa[:, b].astype(np.int64) << (8 * b)
        lists.append(ln)
        codes.append(sa[:, cc:])
    if not lists:
        return np.zeros(0, np.int64), np.zeros((0, ivf.code_size), np.uint8)
    return np.concatenate(lists), np.concatenate(codes)


def lists_of(index) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(list number, id, code) of every entry of an IVF index, as arrays."""
    import faiss

    ivf = faiss.extract_index_ivf(index)
    inv, cs = ivf.invlists, ivf.code_size
    lists, ids, codes = [], [], []
    for lst in range(ivf.nlist):
        size = inv.list_size(lst)
        if not size:
            continue
        ids.append(faiss.rev_swig_ptr(inv.get_ids(lst), size).copy())
        codes.append(faiss.rev_swig_ptr(inv.get_codes(lst), size * cs).copy().reshape(size, cs))
        lists.append(np.full(size, lst, dtype=np.int64))
    if not ids:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros((0, cs), np.uint8)
    return np.concatenate(lists), np.concatenate(ids), np.concatenate(codes)


def fill(codebook, lists: np.ndarray, ids: np.ndarray, codes: np.ndarray):
    """An index of the codebook holding these entries (no encoding: the codes are copied)."""
    import faiss

    index = faiss.clone_index(codebook)
    ivf = faiss.extract_index_ivf(index)
    order = np.lexsort((ids, lists))
    lists, ids, codes = lists[order], np.ascontiguousarray(ids[order]), np.ascontiguousarray(codes[order])
    bounds = np.searchsorted(lists, np.arange(ivf.nlist + 1))
    for lst in np.flatnonzero(np.diff(bounds)):
        a, b = bounds[lst], bounds[lst + 1]
        ivf.invlists.add_entries(int(lst), int(b - a), faiss.swig_ptr(ids[a:b]), faiss.swig_ptr(codes[a:b]))
    ivf.ntotal = index.ntotal = len(ids)
    return index


def same_codebook(index, codebook) -> bool:
    """Is a segment's index encoded with this codebook (same coarse centroids)?"""
    import faiss

    a, b = faiss.extract_index_ivf(index), faiss.extract_index_ivf(codebook)
    if a.nlist != b.nlist or a.code_size != b.code_size or a.d != b.d:
        return False
    ca = faiss.rev_swig_ptr(faiss.downcast_index(a.quantizer).get_xb(), a.nlist * a.d)
    cb = faiss.rev_swig_ptr(faiss.downcast_index(b.quantizer).get_xb(), b.nlist * b.d)
    if not np.array_equal(ca, cb):
        return False
    a, b = faiss.downcast_index(a), faiss.downcast_index(b)
    if hasattr(a, "pq") != hasattr(b, "pq"):
        return False
    return not hasattr(a, "pq") or np.array_equal(faiss.vector_to_array(a.pq.centroids),
                                                  faiss.vector_to_array(b.pq.centroids))


def write_compressed(path: Path, vectors, owner: np.ndarray, fs, spans, root: Path | None,
                     codebook: dict | None, codes: tuple | None = None, stream: Path | None = None,
                     exact: list | None = None) -> dict:
    """A compressed part; `codes` ((lists, ids, codes) already made with `codebook`): copied, not encoded."""
    if codebook is None or codebook.get("codec") != fs.index or needs_new(codebook, vectors, root):
        codebook = train(root, vectors, fs.index, fs.pq_m)
    trained = load_codebook(root, codebook)
    write_part(path, trained, vectors, codes, stream, written=exact is not None)
    np.save(path / "owner.npy", owner)
    if spans is not None:
        np.save(path / "spans.npy", np.asarray(spans, dtype=np.int64).reshape(-1, 2))
    return {"path": path.name, "vectors": int(len(vectors)),
            "multi_vector": bool(len(owner) and len(np.unique(owner)) != len(owner)), "faiss": fs.to_dict(),
            "codebook": codebook, "bytes": part_bytes(path, len(vectors), fs, vectors.shape[1], trained),
            **({"exact": [list(f) for f in exact]} if exact and exact != [(exact_vectors.FILE, len(vectors))] else {})}


def part_bytes(path: Path, n: int, fs, d: int, codebook=None) -> dict:
    """Bytes per vector a node holds for this part: in RAM while searching (what is read at open
    or touched by every search: codes and ids, HNSW links, flat vectors, the owner map), and on disk."""
    disk = sum(f.stat().st_size for f in Path(path).iterdir() if f.is_file())
    if codebook is not None:
        import faiss
        ivf = faiss.extract_index_ivf(codebook)
        ram = ivf.code_size + 8 + 8 + (ivf.nlist * d * 4) / max(n, 1)
    elif fs.index == "hnsw":
        ram = d * 4 + fs.hnsw_m * 2 * 4 * 1.06 + 8 + 8        # vectors, level-0 links (+ upper levels), owner
    else:
        ram = d * 4 + 8
    return {"ram_per_vector": round(ram, 1), "disk_per_vector": round(disk / max(n, 1), 1)}


class CompressedIndex:
    """A segment's compressed part, shaped as the FAISS index DenseSearcher uses (search,
    reconstruct_batch, ntotal, d): candidates from the codes, scores from the exact vectors."""

    def __init__(self, path: Path, n: int, d: int, nprobe: int, rescore: int, files: list | None = None):
        import faiss

        path = Path(path)
        flags = getattr(faiss, "IO_FLAG_MMAP_IFC", 0) | faiss.IO_FLAG_READ_ONLY
        try:
            self.codes = faiss.read_index(str(path / "ivf.index"), flags)
        except RuntimeError:
            self.codes = faiss.read_index(str(path / "ivf.index"))
        self.ntotal, self.d, self.rescore, self.nprobe = int(self.codes.ntotal), int(self.codes.d), rescore, nprobe
        self.nlist = int(faiss.extract_index_ivf(self.codes).nlist)
        if self.ntotal != n or self.d != d:
            raise IndexFormatError(f"the dense index {path} is damaged: {self.ntotal} codes x {self.d}, the manifest "
                                   f"says {n} x {d}. Rebuild it with `ldr index`")
        self.exact = exact_vectors.ExactVectors(path, files or [(exact_vectors.FILE, n)], d)

    def search(self, q: np.ndarray, k: int):
        """(scores, rows) of the best k rows per query, exactly scored, best first (-1 pads)."""
        import faiss

        q = np.ascontiguousarray(q, dtype=np.float32)
        want = min(self.ntotal, max(k, self.rescore))
        # probe enough cells to hold twice the rows asked for: the pipeline asks 4,000 passage rows,
        # more than 32 cells of a 2M-vector segment hold (it would then deepen its request to n)
        nprobe = int(min(self.nlist, max(self.nprobe, np.ceil(2 * want * self.nlist / max(self.ntotal, 1)))))
        _, cand = self.codes.search(q, want, params=faiss.SearchParametersIVF(nprobe=nprobe))
        scores = np.full((len(q), k), -np.inf, dtype=np.float32)
        rows = np.full((len(q), k), -1, dtype=np.int64)
        for i, c in enumerate(cand):
            c = np.sort(c[c >= 0])                 # ascending rows: the exact vectors are read in file order
            s = np.einsum("ij,j->i", self.exact[c], q[i])
            order = np.lexsort((c, -s))[:k]
            scores[i, :len(order)], rows[i, :len(order)] = s[order], c[order]
        return scores, rows

    def reconstruct_batch(self, rows: np.ndarray) -> np.ndarray:
        return np.asarray(self.exact[np.asarray(rows, dtype=np.int64)])

    def reconstruct_n(self, start: int, n: int) -> np.ndarray:
        return np.asarray(self.exact[start:start + n])

    def resident_bytes(self) -> int:
        """What a search keeps in RAM: the codes and ids of every list, and the coarse centroids."""
        import faiss

        ivf = faiss.extract_index_ivf(self.codes)
        return int(self.ntotal * (ivf.code_size + 8) + ivf.nlist * self.d * 4)


def verify(path: Path, codebook, n: int, d: int, files: list | None = None) -> list[str]:
    """`ldr check`: every row has exactly one code, and each code is what the codebook makes of the
    row's exact vector (a flipped byte, a list or id moved, or vectors swapped are found)."""
    import faiss

    try:
        index = faiss.read_index(str(Path(path) / "ivf.index"))
    except RuntimeError as e:
        return [f"dense codes cannot be read ({e})"]
    if codebook is not None and not same_codebook(index, codebook):
        return ["dense codes were not made with the codebook the manifest names"]
    lists, ids, codes = lists_of(index)
    if len(ids) != n or not np.array_equal(np.sort(ids), np.arange(n)):
        return [f"dense codes cover {len(np.unique(ids))} of {n} rows"]
    try:
        exact = exact_vectors.ExactVectors(path, files or [(exact_vectors.FILE, n)], d)
    except (IndexFormatError, OSError) as e:
        return [str(e)]
    order = np.argsort(ids)
    lists, codes = lists[order], codes[order]
    for start in range(0, n, 65536):
        v = np.ascontiguousarray(exact[start:start + 65536])
        if not np.isfinite(v).all() or np.abs(np.linalg.norm(v, axis=1) - 1).max() > 1e-3:
            return [f"dense vectors {start}+ are not finite unit vectors"]
        want_lists, want_codes = encode(codebook if codebook is not None else index, v)
        if not np.array_equal(want_lists, lists[start:start + len(v)]) or \
                not np.array_equal(want_codes, codes[start:start + len(v)]):
            return [f"dense codes of rows {start}+ differ from their vectors' (damaged codes or vectors)"]
    return []
