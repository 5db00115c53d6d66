"""The learned-sparse component: CSR (document → terms) and CSC (term → postings) as .npy.

Query-time scoring touches only the postings of the query's terms (an inverted index), with the
arrays memory-mapped: Σ_t w_q(t) · w_d(t) accumulated per document, then a top-k selection.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .. import npy
from ..arrays import ranges
from ..errors import IndexFormatError
from ..encode.pipeline import BatchedWriter
from .topk import top_k_dense

FILES = ("doc_indptr", "doc_terms", "doc_weights", "term_indptr", "term_docs", "term_weights")


def save_inverted(path: Path, terms: np.ndarray, values: np.ndarray, counts: list[int], n_terms: int,
                  value_name: str) -> np.ndarray:
    """Turn per-document postings (documents in order, `counts` terms each) into the term-major
    layout: term_indptr.npy, term_docs.npy, term_<value_name>.npy. Returns the document indptr."""
    import scipy.sparse as sp

    indptr = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    csc = sp.csr_matrix((values, terms, indptr), shape=(len(counts), max(n_terms, 1))).tocsc()
    np.save(path / "term_indptr.npy", csc.indptr.astype(np.int64))
    np.save(path / "term_docs.npy", csc.indices.astype(np.int32))
    np.save(path / f"term_{value_name}.npy", csc.data.astype(np.float32))
    return indptr


def gather_rows(indptr, cols, vals, rows_kept):
    """The postings of the kept rows of a CSR layout, in order, and their counts (merges)."""
    counts = (indptr[1:] - indptr[:-1])[rows_kept]
    if not len(rows_kept):
        return cols[:0], vals[:0], counts
    idx = np.concatenate([np.arange(indptr[r], indptr[r + 1]) for r in rows_kept])
    return cols[idx], vals[idx], counts


class SparseWriter(BatchedWriter):
    # a batch's weights are a dense (documents, vocabulary) matrix before pruning: 31 MB at 256
    max_docs = 256

    def __init__(self, path: Path, encoder, docs_per_batch: int | None = None, pipeline=None,
                 vocab_size: int | None = None):
        super().__init__(docs_per_batch, pipeline=pipeline, encoder=encoder)
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self._terms = open(self.path / "terms.i32", "wb")
        self._weights = open(self.path / "weights.f32", "wb")
        self._lengths: list[int] = []
        self._vocab = vocab_size     # known for an existing index: no model is loaded for an empty part

    def _prepare_batch(self, docnos: list[int], texts: list[str], body_starts: list[int]):
        job = self.encoder.prepare_documents(texts)
        self.tokens += sum(map(len, job[1]))
        return job

    def _write_prepared(self, job) -> None:
        mat = self.encoder.finish_documents(job, self._count)   # rows follow docnos, which arrive in order
        mat.sort_indices()
        self._terms.write(mat.indices.astype(np.int32).tobytes())
        self._weights.write(mat.data.astype(np.float32).tobytes())
        self._lengths.extend(np.diff(mat.indptr).tolist())

    def abort(self) -> None:
        self._terms.close()
        self._weights.close()

    def close(self) -> dict:
        self._finish()
        self._terms.close()
        self._weights.close()
        terms = np.fromfile(self.path / "terms.i32", dtype=np.int32)
        weights = np.fromfile(self.path / "weights.f32", dtype=np.float32)
        n_docs = len(self._lengths)
        vocab = self.encoder.vocab_size if self.loaded or not self._vocab else self._vocab
        indptr = save_inverted(self.path, terms, weights, self._lengths, vocab, "weights")
        np.save(self.path / "doc_indptr.npy", indptr)
        np.save(self.path / "doc_terms.npy", terms)
        np.save(self.path / "doc_weights.npy", weights)
        (self.path / "terms.i32").unlink()
        (self.path / "weights.f32").unlink()
        return {"path": self.path.name, "documents": n_docs, "vocab_size": vocab, "postings": int(len(terms)),
                "avg_terms_per_doc": round(len(terms) / max(n_docs, 1), 1),
                **({"model": self.encoder.describe()} if self.loaded else {})}


def structure_problems(a: dict, n_docs: int | None, full: bool = False) -> list[str]:
    """Offsets consistent with the postings (cheap: O(documents + terms)); with `full`, every
    term id and document number in range and every weight finite (O(postings): `ldr check`)."""
    out = []
    if any(a[f].ndim != 1 for f in FILES):
        return ["an array is not one-dimensional"]
    dip, tip = a["doc_indptr"], a["term_indptr"]
    if n_docs is not None and len(dip) != n_docs + 1:
        out.append(f"doc_indptr.npy covers {len(dip) - 1} documents, the docstore {n_docs}")
    for name, ip, data in (("doc", dip, ("doc_terms", "doc_weights")), ("term", tip, ("term_docs", "term_weights"))):
        n = len(a[data[0]])
        if len(a[data[1]]) != n:
            out.append(f"{data[0]}.npy and {data[1]}.npy differ in length")
        if len(ip) == 0 or ip[0] != 0 or ip[-1] != n or np.any(np.diff(ip) < 0):
            out.append(f"{name}_indptr.npy does not match its {n} postings")
    if len(a["doc_terms"]) != len(a["term_docs"]):
        out.append("the document-major and term-major postings differ in count")
    if full and not out:
        vocab = len(tip) - 1
        if len(a["doc_terms"]) and (a["doc_terms"].min() < 0 or a["doc_terms"].max() >= vocab):
            out.append("doc_terms.npy holds term ids outside the vocabulary")
        if len(a["term_docs"]) and (a["term_docs"].min() < 0 or a["term_docs"].max() >= len(dip) - 1):
            out.append("term_docs.npy holds document numbers out of range")
        for f in ("doc_weights", "term_weights"):
            if len(a[f]) and not np.isfinite(a[f]).all():
                out.append(f"{f}.npy holds non-finite weights")
    return out


class SparseIndex:
    """Memory-mapped inverted index over learned term weights."""

    def __init__(self, path: Path, n_docs: int | None = None):
        p = Path(path)
        self.arrays = {f: npy.load(p / f"{f}.npy", mmap_mode="r") for f in FILES}
        self.n_docs = len(self.arrays["doc_indptr"]) - 1
        problems = structure_problems(self.arrays, n_docs)
        if problems:
            raise IndexFormatError(f"the sparse index {p} is damaged: {'; '.join(problems)}. Rebuild it with `ldr index`")

    def score(self, q_terms: np.ndarray, q_weights: np.ndarray) -> np.ndarray:
        """Exact Σ_t w_q(t)·w_d(t) for every document (zeros where no term is shared)."""
        ip, docs, w = self.arrays["term_indptr"], self.arrays["term_docs"], self.arrays["term_weights"]
        scores = np.zeros(self.n_docs, dtype=np.float32)
        q_terms = np.asarray(q_terms, dtype=np.int64)
        start = np.asarray(ip[q_terms], dtype=np.int64)
        count = np.asarray(ip[q_terms + 1], dtype=np.int64) - start
        at = ranges(start, count)
        if not len(at):
            return scores
        # every term's postings at once, added in the query's term order: each document's float32
        # sum is made in the order a term at a time made it (the same scores to the bit)
        np.add.at(scores, docs[at], np.repeat(np.asarray(q_weights), count) * w[at])
        return scores

    def top_k(self, q_terms, q_weights, k: int) -> list[tuple[int, float]]:
        return top_k_dense(self.score(q_terms, q_weights), k)

    def doc_score(self, docno: int, q_terms: np.ndarray, q_weights: np.ndarray) -> float:
        terms, weights = self.doc_vector(docno)
        common, qi, di = np.intersect1d(q_terms, terms, assume_unique=True, return_indices=True)
        return float(np.einsum("i,i->", q_weights[qi], weights[di])) if len(common) else 0.0

    def held_terms(self, live: np.ndarray) -> np.ndarray:
        """Each term id: whether one of the `live` documents holds it. Kept for the part's count of
        deleted documents (a deleted row never comes back): a search's generation asks once."""
        gone = int(len(live) - np.count_nonzero(live))
        held = getattr(self, "_held", None)
        if held is None or held[0] != gone:
            tip = self.arrays["term_indptr"]
            has = np.diff(tip) > 0
            if gone:
                terms = self.arrays["doc_terms"][np.repeat(live, np.diff(self.arrays["doc_indptr"]))]
                if len(terms) and (terms.min() < 0 or terms.max() >= len(has)):
                    raise IndexFormatError("a sparse segment holds term ids outside its vocabulary: run `ldr check` "
                                           "and rebuild the index with `ldr index`")
                has = np.zeros(len(tip) - 1, dtype=bool)
                has[terms] = True
            self._held = held = (gone, has)
        return held[1]

    def doc_vector(self, docno: int) -> tuple[np.ndarray, np.ndarray]:
        ip = self.arrays["doc_indptr"]
        s, e = ip[docno], ip[docno + 1]
        return np.asarray(self.arrays["doc_terms"][s:e]), np.asarray(self.arrays["doc_weights"][s:e])
