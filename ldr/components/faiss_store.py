"""The dense component: FAISS over document (or passage) vectors, plus passage → document map.

`auto` (the default) chooses per segment: exact inner product (IndexFlatIP) up to
AUTO_HNSW_ABOVE vectors, HNSW past it, where a flat scan becomes the slowest stage of a query
(bench/README.md "Search latency": 65 ms of an 87 ms query at 400k vectors), and compressed codes
with exact rescoring (compressed.py) past AUTO_COMPRESSED_ABOVE, where a graph no longer fits a
node's memory. `flat`, `hnsw`, `rabitq` and `ivfpq` force one. Vectors are L2-normalised, so inner product is cosine. The index moves to GPU
when FAISS sees one.
"""
from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import asdict, dataclass

from ..schema import setting
from pathlib import Path

import numpy as np

from .. import npy
from ..arrays import ranges
from ..errors import ConfigError, IndexFormatError
from ..encode.pipeline import BatchedWriter
from . import compressed, exact_vectors
from .compressed import CODECS

log = logging.getLogger(__name__)
INDEX_TYPES = ("auto", "flat", "hnsw", "rabitq", "ivfpq")
# vectors; bench/bench_faiss_auto.py at the pipeline's 1,000 candidates, 2 cores: flat 7.5 ms at
# 50k and 17 ms at 100k, HNSW ~2.4 ms (recall@10 0.97 of flat's documents on real MiniLM vectors)
AUTO_HNSW_ABOVE = 50_000
# vectors; bench/bench_compressed.py: past it RaBitQ codes + exact rescoring hold 72 B a vector in
# RAM against HNSW's ~1.8 KB, at HNSW's recall and latency
AUTO_COMPRESSED_ABOVE = 1_000_000


@dataclass
class FaissSettings:
    index: str = setting("auto", "--faiss", choices=INDEX_TYPES,
                         help="FAISS index type; auto: per segment exact (flat) up to 50,000 vectors, HNSW to "
                              "1,000,000, then rabitq (1-bit codes in RAM, exact rescoring from vectors on disk).")
    hnsw_m: int = 32
    ef_construction: int = 200
    ef_search: int = 128
    nlist: int | None = None          # IVF cells (default ~4·sqrt(n))
    pq_m: int | None = None           # PQ sub-quantisers (default d/8... must divide d)
    nprobe: int = 32                  # IVF cells probed (at least; more when the depth asks more rows)
    rescore: int = 400                # rabitq / ivfpq: at least this many rows rescored exactly

    def __post_init__(self):
        if self.index not in INDEX_TYPES:
            raise ConfigError(f"unknown FAISS index type {self.index!r}; choose one of {', '.join(INDEX_TYPES)}")

    def to_dict(self):
        return asdict(self)


def concrete(fs: FaissSettings, n: int) -> FaissSettings:
    """`auto` made concrete for a segment of n vectors; any other type as it is."""
    if fs.index != "auto":
        return fs
    kind = "rabitq" if n > AUTO_COMPRESSED_ABOVE else "hnsw" if n > AUTO_HNSW_ABOVE else "flat"
    return FaissSettings(**{**fs.to_dict(), "index": kind})


def compressed_kind(fs: FaissSettings) -> bool:
    return fs.index in CODECS


def build_faiss(vectors: np.ndarray, fs: FaissSettings):
    import faiss

    n, d = vectors.shape
    fs = concrete(fs, n)
    if fs.index == "flat":
        index = faiss.IndexFlatIP(d)
    elif fs.index == "hnsw":
        index = faiss.IndexHNSWFlat(d, fs.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = fs.ef_construction
    else:
        raise ConfigError(f"{fs.index} is written by compressed.write_part, not as one FAISS index")
    index.add(vectors)
    return index


class DenseWriter(BatchedWriter):
    """Encodes documents in batches as they stream past, appending vectors to disk."""

    def __init__(self, path: Path, encoder, faiss_settings: FaissSettings | None = None,
                 docs_per_batch: int | None = None, allow_small: bool = False, pipeline=None,
                 dim: int | None = None, root: Path | None = None, codebook: dict | None = None):
        super().__init__(docs_per_batch, pipeline=pipeline, encoder=encoder)
        self.allow_small = allow_small
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.fs = faiss_settings or FaissSettings()
        self._dim = dim          # the index's dimension, if known: no model is loaded for an empty part
        self.root, self.codebook = root, codebook     # compressed kinds: where codebooks live, the index's
        self._stream = self.path / "stream.f32"
        self._raw = open(self._stream, "wb")
        self._owners: list[np.ndarray] = []
        self._spans: list[np.ndarray] = []
        self.count = 0

    def _prepare_batch(self, docnos: list[int], texts: list[str], body_starts: list[int]):
        job = self.encoder.prepare_documents(texts, spans=True)
        self.tokens += sum(map(len, job[1]))
        return docnos, body_starts, job

    def _write_prepared(self, prepared) -> None:
        docnos, body_starts, job = prepared
        vecs, owner, spans = self.encoder.finish_documents(job, self._count)
        # spans into the document's text (the body), not into "title\n" + body
        shift = np.asarray(body_starts, dtype=np.int64)[owner][:, None]
        spans = np.where(spans >= 0, np.maximum(spans - shift, 0), spans)
        self._raw.write(np.ascontiguousarray(vecs, dtype=np.float32).tobytes())
        self._owners.append(np.asarray(docnos, dtype=np.int64)[owner])
        self._spans.append(spans)
        self.count += len(vecs)

    def abort(self) -> None:
        self._raw.close()

    def close(self) -> dict:
        self._finish()
        self._raw.close()
        d = self.encoder.dim if self.loaded or not self._dim or not self.count else self._dim
        # no vectors (a shard no document was routed to): the model still describes itself
        vectors = np.memmap(self._stream, dtype=np.float32, mode="r", shape=(self.count, d)) \
            if self.count else np.zeros((0, d), np.float32)
        owner = np.concatenate(self._owners) if self._owners else np.zeros(0, dtype=np.int64)
        spans = np.concatenate(self._spans) if self._spans else np.zeros((0, 2), dtype=np.int64)
        entry = save_dense(self.path, vectors, owner, self.fs, self.allow_small, spans, self.root, self.codebook,
                           stream=self._stream)
        del vectors
        self._stream.unlink(missing_ok=True)     # a compressed part took it as its vectors.f32
        about = {"model": self.encoder.describe()} if self.loaded else {}
        if entry.get("codebook"):
            about["codebook"] = entry["codebook"]      # the index's codebook: later segments reuse it
        return dict(entry, dim=int(d), **about)


def save_dense(path: Path, vectors: np.ndarray, owner: np.ndarray, fs: FaissSettings, allow_small: bool = False,
               spans: np.ndarray | None = None, root: Path | None = None, codebook: dict | None = None,
               stream: Path | None = None) -> dict:
    """Write a segment's dense part: owner.npy + spans.npy (each vector's characters in its
    document: a hit shows its best passages from them) and either faiss.index (flat, HNSW) or
    ivf.index + vectors.f32 (rabitq, ivfpq: codes against the index's codebook, `codebook` when it
    has one and it still fits, else one trained here under `root`; `stream`: a raw float32 file of
    the vectors, renamed into place instead of copied). A segment too small to train codes is
    stored flat (exact) when allowed."""
    fs = concrete(fs, len(vectors))     # the part records what it holds; the component keeps `auto`
    if compressed_kind(fs):
        if len(vectors) < compressed.MIN_TRAIN and not (codebook and codebook.get("codec") == fs.index):
            if not allow_small:
                raise ConfigError(f"{fs.index} needs at least {compressed.MIN_TRAIN} vectors to train "
                                  f"(have {len(vectors)}); use --faiss flat")
            fs = FaissSettings(**{**fs.to_dict(), "index": "flat"})
        else:
            return compressed.write_compressed(path, vectors, owner, fs, spans, root, codebook, stream=stream)
    return write_dense(path, build_faiss(vectors, fs), owner, fs, spans)


def write_dense(path: Path, index, owner: np.ndarray, fs: FaissSettings, spans: np.ndarray | None = None) -> dict:
    """Write a built (or grown) index with its owner and spans; the part's manifest entry."""
    import faiss

    faiss.write_index(index, str(path / "faiss.index"))
    np.save(path / "owner.npy", owner)
    if spans is not None:
        np.save(path / "spans.npy", np.asarray(spans, dtype=np.int64).reshape(-1, 2))
    return {"path": path.name, "vectors": int(index.ntotal),
            "multi_vector": bool(len(owner) and len(np.unique(owner)) != len(owner)), "faiss": fs.to_dict(),
            "bytes": compressed.part_bytes(path, int(index.ntotal), fs, int(index.d))}


def graph_to_grow(first, rows: np.ndarray, fs: FaissSettings, n_total: int) -> bool:
    """Whether a merge can grow the first source's HNSW graph instead of building one: HNSW is
    built by inserting vectors one after another, so inserting the other sources' vectors into
    the first's graph is the build itself, resumed (Lucene's merge does the same). It needs the
    first source whole (FAISS cannot remove a vector from a graph: a source with deleted rows is
    rebuilt) and at the front of the merged segment, so vector ids stay in document order."""
    if first is None or n_total <= 0:
        return False
    had = first.entry.get("faiss", {})
    return (concrete(fs, n_total).index == "hnsw" and had.get("index") == "hnsw"
            and had.get("hnsw_m") == fs.hnsw_m and bool(len(rows)) and bool((rows == np.arange(len(rows))).all()))


def grow_graph(folder: Path, vectors: np.ndarray, fs: FaissSettings):
    """The first source's HNSW index (read whole: it is written anew) with `vectors` inserted."""
    import faiss

    index = faiss.read_index(str(Path(folder) / "faiss.index"))
    index.hnsw.efConstruction = fs.ef_construction
    if len(vectors):
        index.add(np.ascontiguousarray(vectors, dtype=np.float32))
    return index


def load_vectors(path: Path, entry: dict, dim: int) -> np.ndarray:
    """A segment's exact vectors, for merging: flat and HNSW hold them in faiss.index, compressed
    parts in vectors.f32 (mapped), IVF-PQ parts written before codebooks in vectors.npy."""
    import faiss

    path = Path(path)
    if entry.get("codebook"):
        return exact_vectors.ExactVectors(path, exact_vectors.files_of(entry), dim)
    if (path / "vectors.npy").is_file():
        return npy.load(path / "vectors.npy", mmap_mode="r")
    index = faiss.read_index(str(path / "faiss.index"))
    return index.reconstruct_n(0, index.ntotal) if index.ntotal else np.zeros((0, index.d), np.float32)


def check_dense(path: Path, index, owner: np.ndarray, comp: dict, n_docs: int | None,
                spans: np.ndarray | None = None, full: bool = False) -> None:
    """Cheap structure checks at open (O(vectors) integer work, no vector reads); the spans' order,
    which would read every span, `full` only (`ldr check`)."""
    problems = []
    vectors, dim = comp.get("vectors", index.ntotal), comp.get("dim", index.d)
    if index.ntotal != vectors or index.d != dim:
        problems.append(f"faiss.index holds {index.ntotal} x {index.d}, the manifest says {vectors} x {dim}")
    if owner.ndim != 1 or owner.dtype.kind not in "iu" or len(owner) != index.ntotal:
        problems.append(f"owner.npy has shape {owner.shape} ({owner.dtype}), expected ({index.ntotal},) integers")
    elif len(owner) and (owner[0] < 0 or (n_docs is not None and owner[-1] >= n_docs) or np.any(np.diff(owner) < 0)):
        problems.append("owner.npy maps vectors to documents out of range or out of order")
    if spans is not None and (spans.ndim != 2 or spans.shape != (index.ntotal, 2) or spans.dtype.kind not in "iu"
                              or (full and len(spans) and (spans[:, 0] > spans[:, 1]).any())):
        problems.append(f"spans.npy has shape {spans.shape} ({spans.dtype}), expected ({index.ntotal}, 2) ordered offsets")
    if problems:
        raise IndexFormatError(f"the dense index {path} is damaged: {'; '.join(problems)}. Rebuild it with `ldr index`")


def prefetch_graph(file: Path, vectors: int, dim: int) -> None:
    """Read an HNSW file's graph (all but its vectors, which FAISS writes last) into the page cache in
    one sequential pass. FAISS maps the file with MADV_RANDOM and then touches every page of the
    graph at open, one small read per page from disk: 3.9 s at 1M vectors, against 0.13 s for
    MADV_POPULATE_READ (Linux 5.14+; older kernels: one buffered read) and ~3 ms when cached."""
    import mmap

    try:
        with open(file, "rb") as fh:
            graph = os.fstat(fh.fileno()).st_size - int(vectors) * int(dim) * 4
            if graph <= 0:
                return
            with contextlib.suppress(OSError, ValueError, AttributeError, TypeError):
                with mmap.mmap(fh.fileno(), graph, prot=mmap.PROT_READ) as m:
                    m.madvise(getattr(mmap, "MADV_POPULATE_READ", 22))
                    return
            buf, pos = bytearray(16 << 20), 0
            while pos < graph and (n := fh.readinto(memoryview(buf)[:min(len(buf), graph - pos)])):
                pos += n
    except OSError:        # the open below reports a missing or unreadable file
        pass


@contextlib.contextmanager
def one_thread():
    """FAISS on one OpenMP thread for this thread's searches (OpenMP's thread count is per calling
    thread, so a build elsewhere keeps its cores). One query over 40k flat vectors on 2 cores: the
    dense stage 28.6 → 12.1 ms p50 in the pipeline, whose other stages' threads the second FAISS
    thread fought (bench/README.md "one FAISS thread")."""
    import faiss

    n = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(n)


class DenseSearcher:
    def __init__(self, path: Path, comp: dict, n_docs: int | None = None, full_check: bool = False):
        import faiss

        fs = comp["faiss"]
        if comp.get("codebook"):
            self.index = compressed.CompressedIndex(path, comp.get("vectors", 0), comp.get("dim", 0),
                                                    fs.get("nprobe", 16), fs.get("rescore", 400),
                                                    exact_vectors.files_of(comp))
        else:
            self.index = self._open_faiss(Path(path), comp)
        if faiss.get_num_gpus() > 0 and not comp.get("codebook") and fs["index"] != "hnsw":  # no GPU HNSW
            self.index = faiss.index_cpu_to_all_gpus(self.index)
        # one int per passage: small enough to hold in memory (element access on a memmap is slow)
        self.owner = npy.load(Path(path) / "owner.npy")
        self.multi = comp.get("multi_vector", False)
        # None: built before spans were kept (passages then come from term windows only)
        sp = Path(path) / "spans.npy"
        # mapped: a hit reads its passages' spans only (10-50 per long document: 0.8 GB at 1M documents)
        self.spans = npy.load(sp, mmap_mode="r") if sp.is_file() else None
        check_dense(Path(path), self.index, self.owner, comp, n_docs, self.spans, full_check)

    @staticmethod
    def _open_faiss(path: Path, comp: dict):
        import faiss

        fs = comp["faiss"]
        flags = faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY if fs["index"] in ("flat", "auto") else 0
        if fs["index"] == "hnsw":
            # the whole file mapped (FAISS 1.15 maps graph and vectors): a cold search at 400k vectors
            # opened the index in 0.10 s instead of 0.43 s, and pages in the vectors it visits; the
            # graph, which the open touches whole, is read ahead first (prefetch_graph)
            flags = getattr(faiss, "IO_FLAG_MMAP_IFC", 0) | faiss.IO_FLAG_READ_ONLY
            prefetch_graph(path / "faiss.index", comp.get("vectors", 0), comp.get("dim", 0))
        try:
            index = faiss.read_index(str(path / "faiss.index"), flags)
        except RuntimeError:
            index = faiss.read_index(str(path / "faiss.index"))
        if isinstance(index, faiss.IndexHNSW):
            index.hnsw.efSearch = fs["ef_search"]
        elif fs["index"] == "ivfpq":      # written before codebooks: PQ scores, its own training
            index.nprobe = fs["nprobe"]
            index.make_direct_map()       # passage rescoring reconstructs vectors by id
        return index

    def search_vectors(self, qvecs: np.ndarray, k: int) -> list[list[tuple[int, float]]]:
        """Top-k documents per query vector; multi-vector scores a document by its best passage."""
        n = self.index.ntotal
        if n == 0:
            return [[] for _ in range(len(qvecs))]
        if not self.multi:
            scores, rows = self.index.search(np.ascontiguousarray(qvecs, dtype=np.float32), min(k, n))
            return [[(int(self.owner[r]), float(s)) for r, s in zip(rr, ss) if r >= 0] for rr, ss in zip(rows, scores)]
        results = []
        for q in qvecs:
            depth = min(n, 4 * k)
            while True:
                scores, rows = self.index.search(q[None].astype(np.float32), depth)
                valid = rows[0] >= 0
                docs, sc = self.owner[rows[0][valid]], scores[0][valid]
                # rows come best first, so a document's first row is its best passage
                uniq, first = np.unique(docs, return_index=True)
                if len(uniq) >= k or depth >= n:
                    break
                depth = min(n, depth * 4)
            order = np.lexsort((uniq, -sc[first]))[:k]
            results.append([(int(uniq[i]), float(sc[first[i]])) for i in order])
        return results

    def search_rep(self, qvec: np.ndarray, k: int) -> list[tuple[int, float]]:
        return self.search_vectors(qvec[None], k)[0]

    def _cosines(self, rows: np.ndarray, qvec: np.ndarray) -> np.ndarray:
        with one_thread():      # past 1,000 rows FAISS reads them on OpenMP threads, which then spin
            vecs = self.index.reconstruct_batch(rows.astype(np.int64)) if len(rows) else np.zeros((0, len(qvec)))
        # einsum, not `@`: a BLAS gemv here wakes OpenBLAS's thread pool, whose spinning threads
        # took a core from torch's query encoder (measured 5x slower queries on 2 cores)
        return np.einsum("ij,j->i", vecs, qvec.astype(vecs.dtype, copy=False))

    def every_best(self, qvec: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """(each document with vectors, ascending; its best passage's score), every vector scored by
        the kernel this index's own search runs for one query (FAISS's inner products: the same
        float32 scores, to the bit), in one pass; None where the index is not exact inner products
        in memory. A search that wants every document (a small index: the depth is its size) needs
        no top-k over every row, nor the rounds of growing depth before it."""
        import faiss

        index = self.index
        if not isinstance(index, faiss.IndexFlat) or index.metric_type != faiss.METRIC_INNER_PRODUCT \
                or not index.ntotal:
            return None
        n, d = index.ntotal, index.d
        vecs = faiss.rev_swig_ptr(index.get_xb(), n * d)
        q = np.ascontiguousarray(qvec, dtype=np.float32)
        sims = np.empty(n, dtype=np.float32)
        faiss.fvec_inner_products_ny(faiss.swig_ptr(sims), faiss.swig_ptr(q), faiss.swig_ptr(vecs), d, n)
        if getattr(self, "_firsts", None) is None:      # owner rows are in document order
            self._firsts = np.flatnonzero(np.diff(self.owner, prepend=-1))
        return self.owner[self._firsts], np.maximum.reduceat(sims, self._firsts)

    def passage_scores(self, qvec: np.ndarray, rows: list[int]) -> list[tuple[np.ndarray, np.ndarray | None]]:
        """(cosine of each of a document's vectors to the query, their character spans or None), of
        each of `rows`: their vectors read and scored together (a window stage asks for 50)."""
        lo, hi = np.searchsorted(self.owner, rows, side="left"), np.searchsorted(self.owner, rows, side="right")
        n = np.maximum(hi - lo, 0)
        at = ranges(lo, n)          # lo..hi of each, in order
        sims = self._cosines(at, qvec).astype(np.float64)
        ends = np.cumsum(n).tolist()
        return [(sims[e - k:e], np.array(self.spans[a:a + k]) if self.spans is not None else None) if k
                else (np.zeros(0), None) for a, k, e in zip(lo.tolist(), n.tolist(), ends)]

    def best_passage(self, qvec: np.ndarray, docnos: list[int]) -> np.ndarray:
        """Exact best-passage cosine of each document (owner rows are in document order)."""
        lo = np.searchsorted(self.owner, docnos, side="left")
        hi = np.searchsorted(self.owner, docnos, side="right")
        rows = np.concatenate([np.arange(a, b) for a, b in zip(lo, hi)]) if len(docnos) else np.zeros(0, np.int64)
        sims = self._cosines(rows, qvec)
        out, pos = np.full(len(docnos), -1.0), 0
        for i, (a, b) in enumerate(zip(lo, hi)):
            if b > a:
                out[i] = sims[pos:pos + b - a].max()
            pos += b - a
        return out
