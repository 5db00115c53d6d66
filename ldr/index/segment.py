"""Segments: immutable folders `segments/seg-NNNNNN/` holding the documents written together.

A segment has its docstore rows (with each document's uid), its dense vectors (FAISS + the
vector → row map), its learned-sparse postings and, for the native BM25 backend, its BM25
postings. Deletions never touch it: each generation that deletes rows writes a new
`deletes-GGGGGG.npy` (one bool per row) that its manifest names. Merging copies the live rows'
vectors and postings into a new segment; nothing is re-encoded.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np

from ..corpus import Doc
from .batched import Pipeline
from .bm25.analysis import Analyzer
from .dense import DenseWriter, FaissSettings, load_vectors, save_dense
from .docstore import Docstore, DocstoreWriter

log = logging.getLogger(__name__)
SEGMENTS = "segments"


def segment_rel(number: int) -> str:
    return f"{SEGMENTS}/seg-{number:06d}"


class SegmentWriter:
    """Streams documents into a new segment. `encoders`: {"dense": DenseEncoder, "sparse": SparseEncoder}
    (those the index has); `native`: the analyzer when the BM25 backend is ldr's own."""

    def __init__(self, root: Path, number: int, encoders: dict, native: Analyzer | None, faiss: FaissSettings,
                 allow_small: bool = True):
        self.rel = segment_rel(number)
        self.path = Path(root) / self.rel
        self.path.mkdir(parents=True)
        self.store = DocstoreWriter(self.path)
        self.parts: dict = {}
        # encoding overlaps reading, the docstore and BM25 (see batched.py)
        self.pipeline = Pipeline() if encoders else None
        if "dense" in encoders:
            self.parts["dense"] = DenseWriter(self.path / "dense", encoders["dense"], faiss, allow_small=allow_small,
                                              pipeline=self.pipeline)
        if "sparse" in encoders:
            from .sparse import SparseWriter
            self.parts["sparse"] = SparseWriter(self.path / "sparse", encoders["sparse"], pipeline=self.pipeline)
        if native is not None:
            from .bm25.native_backend import NativeWriter
            self.parts["bm25"] = NativeWriter(self.path / "bm25", native)
        self.uids: list[int] = []

    @property
    def count(self) -> int:
        return self.store.count

    @property
    def tokens(self) -> int:
        """Model input tokens prepared so far (the dense model's, else the sparse model's)."""
        for name in ("dense", "sparse"):
            if name in self.parts:
                return self.parts[name].tokens
        return 0

    def add(self, doc: Doc, uid: int) -> None:
        row = self.store.add(doc, uid)
        self.uids.append(uid)
        for w in self.parts.values():
            w.add(row, doc)

    def close(self) -> tuple[dict, dict]:
        """(segment entry for the manifest, what the writers report about the index-level component)."""
        self.store.close()
        entry = {"name": self.path.name, "path": self.rel, "docs": self.store.count, "live": self.store.count,
                 "deletes": None}
        about = {}
        for name, w in self.parts.items():
            info = w.close() or {}
            if name == "bm25":
                entry["bm25"] = {"path": "bm25"}
            elif name == "dense":
                about["dense"] = {"dim": info["dim"], "model": info["model"]}
                entry["dense"] = {k: info[k] for k in ("path", "vectors", "multi_vector", "faiss")}
            else:
                about["sparse"] = {"vocab_size": info["vocab_size"], "model": info["model"]}
                entry["sparse"] = {k: info[k] for k in ("path", "postings")}
        if self.pipeline is not None:
            self.pipeline.close()
        return entry, about

    @property
    def profile(self) -> dict:
        """Seconds spent tokenising (feeding thread), encoding (worker) and waiting for the worker."""
        return {k: round(v, 3) for k, v in self.pipeline.seconds.items()} if self.pipeline else {}

    def abort(self) -> None:
        if self.pipeline is not None:
            try:
                self.pipeline.close(cancel=True)
            except Exception as e:  # cleanup: keep the original error
                log.debug("pipeline close failed: %s", e)
        for w in [self.store, *self.parts.values()]:
            try:
                w.abort()
            except Exception as e:  # cleanup: keep the original error
                log.debug("abort failed: %s", e)


def read_deletes(root: Path, entry: dict) -> np.ndarray:
    """The deleted-rows mask a generation gives a segment (all False when none)."""
    from .manifest import inside
    from ..errors import IndexFormatError

    if not entry.get("deletes"):
        return np.zeros(entry["docs"], dtype=bool)
    p = inside(root, entry["deletes"], "deletes file")
    mask = np.load(p, allow_pickle=False)
    if mask.dtype != bool or mask.shape != (entry["docs"],) or int((~mask).sum()) != entry["live"]:
        raise IndexFormatError(f"{p} does not match its segment ({entry['docs']} rows, {entry['live']} live); "
                               "run `ldr check` and rebuild the index")
    return mask


def write_deletes(root: Path, entry: dict, mask: np.ndarray, gen: int) -> dict:
    """A new deletes file for this generation; returns the updated entry (the old file stays)."""
    rel = f"{entry['path']}/deletes-{gen:06d}.npy"
    np.save(Path(root) / rel, mask.astype(bool))
    return dict(entry, deletes=rel, live=int((~mask).sum()))


def merge(root: Path, sources: list[tuple[dict, np.ndarray]], number: int, components: dict,
          faiss: FaissSettings | None) -> dict:
    """Copy the live rows of `sources` [(segment entry, deleted mask)] into segment `number`.

    Vectors, sparse postings and native BM25 postings are copied as they are (a document's
    scores do not change); rows keep their uid, so tantivy and Lucene need no change."""
    from .manifest import inside

    rel = segment_rel(number)
    out = Path(root) / rel
    out.mkdir(parents=True)
    store = DocstoreWriter(out)
    row_maps = []          # per source: old row → new row (-1: dropped)
    for entry, deleted in sources:
        src = Docstore(inside(root, entry["path"], "segment"), entry["docs"])
        new_rows = np.full(entry["docs"], -1, dtype=np.int64)
        for row, uid, doc in src.iter_docs():
            if not deleted[row]:
                new_rows[row] = store.add(doc, uid)
        row_maps.append(new_rows)
    store.close()
    seg = {"name": out.name, "path": rel, "docs": store.count, "live": store.count, "deletes": None}
    if "dense" in components:
        seg["dense"] = _merge_dense(root, sources, row_maps, out / "dense", faiss or FaissSettings())
    if "sparse" in components:
        seg["sparse"] = _merge_sparse(root, sources, row_maps, out / "sparse", components["sparse"]["vocab_size"])
    if components.get("bm25", {}).get("backend") == "native":
        _merge_native(root, sources, row_maps, out / "bm25")
        seg["bm25"] = {"path": "bm25"}
    return seg


def _merge_dense(root, sources, row_maps, out: Path, fs: FaissSettings) -> dict:
    import faiss as _faiss
    from .manifest import inside

    vecs, owners, spans = [], [], []
    for (entry, _), rows in zip(sources, row_maps):
        p = inside(root, f"{entry['path']}/dense", "segment")
        index = _faiss.read_index(str(p / "faiss.index"))
        owner = np.load(p / "owner.npy", allow_pickle=False)
        keep = rows[owner] >= 0
        vecs.append(np.asarray(load_vectors(p, index))[keep])
        owners.append(rows[owner][keep])
        # segments written before spans were kept: -1 marks "unknown" for their vectors
        sp = np.load(p / "spans.npy", allow_pickle=False) if (p / "spans.npy").is_file() \
            else np.full((len(owner), 2), -1, np.int64)
        spans.append(sp[keep])
    out.mkdir()
    dim = vecs[0].shape[1] if vecs else 0
    vectors = np.concatenate(vecs) if vecs else np.zeros((0, dim), np.float32)
    owner = np.concatenate(owners) if owners else np.zeros(0, np.int64)
    spans = np.concatenate(spans) if spans else np.zeros((0, 2), np.int64)
    return save_dense(out, np.ascontiguousarray(vectors, dtype=np.float32), owner, fs, allow_small=True, spans=spans)


def _doc_major(arrays: dict, value: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return np.asarray(arrays["doc_indptr"]), np.asarray(arrays["doc_terms"]), np.asarray(arrays[f"doc_{value}"])


def _gather(indptr, cols, vals, rows_kept):
    """The postings of the kept rows, in order, and their counts."""
    counts = (indptr[1:] - indptr[:-1])[rows_kept]
    if not len(rows_kept):
        return cols[:0], vals[:0], counts
    idx = np.concatenate([np.arange(indptr[r], indptr[r + 1]) for r in rows_kept])
    return cols[idx], vals[idx], counts


def _merge_sparse(root, sources, row_maps, out: Path, vocab: int) -> dict:
    from .manifest import inside
    from .sparse import FILES, save_inverted

    terms, weights, counts = [], [], []
    for (entry, _), rows in zip(sources, row_maps):
        p = inside(root, f"{entry['path']}/sparse", "segment")
        a = {f: np.load(p / f"{f}.npy", mmap_mode="r", allow_pickle=False) for f in FILES}
        kept = np.flatnonzero(rows >= 0)
        t, w, c = _gather(*_doc_major(a, "weights"), kept)
        terms.append(t), weights.append(w), counts.append(c)
    out.mkdir()
    terms = np.concatenate(terms).astype(np.int32)
    weights = np.concatenate(weights).astype(np.float32)
    counts = np.concatenate(counts)
    indptr = save_inverted(out, terms, weights, counts.tolist(), vocab, "weights")
    np.save(out / "doc_indptr.npy", indptr)
    np.save(out / "doc_terms.npy", terms)
    np.save(out / "doc_weights.npy", weights)
    return {"path": "sparse", "postings": int(len(terms))}


def _merge_native(root, sources, row_maps, out: Path) -> None:
    """Native BM25 postings: each segment has its own vocabulary, mapped onto a merged one."""
    import scipy.sparse as sp
    from .manifest import inside
    from .sparse import save_inverted

    vocab: dict[str, int] = {}
    terms, tfs, counts, lengths = [], [], [], []
    for (entry, _), rows in zip(sources, row_maps):
        p = inside(root, f"{entry['path']}/bm25", "segment")
        seg_vocab = json.loads((p / "vocab.json").read_text(encoding="utf-8"))
        remap = np.empty(len(seg_vocab), dtype=np.int32)
        for term, t in seg_vocab.items():
            remap[t] = vocab.setdefault(term, len(vocab))
        ip = np.load(p / "term_indptr.npy", allow_pickle=False)
        docs = np.load(p / "term_docs.npy", allow_pickle=False)
        tf = np.load(p / "term_tfs.npy", allow_pickle=False)
        seg_lengths = np.load(p / "doc_lengths.npy", allow_pickle=False)
        csr = sp.csc_matrix((tf, docs, ip), shape=(entry["docs"], max(len(seg_vocab), 1))).tocsr()
        csr.sort_indices()
        kept = np.flatnonzero(rows >= 0)
        t, v, c = _gather(csr.indptr, csr.indices, csr.data, kept)
        terms.append(remap[t]), tfs.append(v), counts.append(c), lengths.append(seg_lengths[kept])
    out.mkdir()
    save_inverted(out, np.concatenate(terms).astype(np.int32), np.concatenate(tfs).astype(np.int32),
                  np.concatenate(counts).tolist(), len(vocab), "tfs")
    np.save(out / "doc_lengths.npy", np.concatenate(lengths).astype(np.float32))
    (out / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
