"""One generation of an index, read consistently: its segments, their deletions, and the
retrievers over all of them.

Document numbers ("docnos") of a snapshot are global: segment i's rows follow segment i-1's.
Deleted rows keep their number but never come out of a retriever or count as documents.
"""
from __future__ import annotations

import bisect
import threading
from pathlib import Path

import numpy as np

from ..corpus import Doc
from ..errors import IndexFormatError
from .docstore import Docstore
from .manifest import inside
from .segment import read_deletes
from .topk import top_k, top_k_dense


class Segments:
    """The docstore side of a snapshot: ids, titles, uids and texts across segments."""

    def __init__(self, root: Path, manifest: dict):
        self.root = Path(root)
        self.entries = manifest["segments"]
        self.stores: list[Docstore] = []
        self.offsets: list[int] = []
        deleted, n = [], 0
        for e in self.entries:
            store = Docstore(inside(root, e["path"], "segment path"), expected_rows=e["docs"])
            self.stores.append(store)
            self.offsets.append(n)
            deleted.append(read_deletes(root, e))
            n += e["docs"]
        self.rows = n
        self.deleted = np.concatenate(deleted) if deleted else np.zeros(0, bool)
        self.live = ~self.deleted
        self.ids: list[str] = [i for s in self.stores for i in s.ids]
        self.titles: list[str] = [t for s in self.stores for t in s.titles]
        self.uids = np.concatenate([s.uids for s in self.stores]) if self.stores else np.zeros(0, np.int64)
        self.count = int(self.live.sum())
        if self.count != manifest["doc_count"]:
            raise IndexFormatError(f"{root}: the segments hold {self.count} live documents, the manifest says "
                                   f"{manifest['doc_count']}; run `ldr check` and rebuild the index")
        self._row_of = {self.ids[d]: d for d in np.flatnonzero(self.live).tolist()}
        if len(self._row_of) != self.count:
            raise IndexFormatError(f"{root}: two live documents share an id; run `ldr check` and rebuild the index")
        self._uid_order = np.argsort(self.uids, kind="stable")
        self._id_rank = None
        self._meta: list[dict] | None = None
        self._masks: dict = {}
        self._meta_lock = threading.RLock()

    # -- what the search pipeline uses -------------------------------------------------
    def __len__(self) -> int:
        return self.count

    def __contains__(self, doc_id: str) -> bool:
        return doc_id in self._row_of

    def row(self, doc_id: str) -> int:
        return self._row_of[doc_id]

    @property
    def id_rank(self):
        """Rank of each document's id in sorted order: ties in score are broken by id, so a
        ranking depends neither on indexing order nor on how segments were assembled."""
        if self._id_rank is None:
            order = np.argsort(np.asarray(self.ids, dtype=object), kind="stable")
            rank = np.empty(len(order), dtype=np.int64)
            rank[order] = np.arange(len(order))
            self._id_rank = rank
        return self._id_rank

    def locate(self, docno: int) -> tuple[int, int]:
        s = bisect.bisect_right(self.offsets, docno) - 1
        return s, docno - self.offsets[s]

    def text(self, docno: int) -> str:
        s, r = self.locate(docno)
        return self.stores[s].text(r)

    def meta(self, docno: int) -> dict:
        s, r = self.locate(docno)
        return self.stores[s].meta(r)

    def doc(self, docno: int) -> Doc:
        s, r = self.locate(docno)
        return self.stores[s].doc(r)

    # -- metadata filters ----------------------------------------------------------------
    def _all_meta(self) -> list[dict]:
        with self._meta_lock:   # read once per generation, on the first filtered search
            if self._meta is None:
                self._meta = [m for s in self.stores for m in s.all_meta()]
        return self._meta

    def meta_fields(self) -> set[str]:
        fields = set()
        for m in self._all_meta():
            fields.update(m)
        return fields

    def meta_values(self, field: str) -> list:
        """The field's value per docno (None where a document lacks it). `path` falls back to
        `source` (indexes built before `path` was recorded: a file's path or "file line N")."""
        meta = self._all_meta()
        if field == "path":
            return [m.get("path", m.get("source")) for m in meta]
        return [m.get(field) for m in meta]

    def filter_mask(self, filters: dict) -> np.ndarray:
        """Live documents passing `filters` (normalised, see ldr/search/filters.py); cached per filter."""
        from ..search.filters import key, mask

        k = key(filters)
        with self._meta_lock:
            got = self._masks.get(k)
            if got is None:
                got = mask(filters, self)
                if len(self._masks) >= 64:
                    self._masks.pop(next(iter(self._masks)))
                self._masks[k] = got
        return got

    def docnos_of_uids(self, uids) -> np.ndarray:
        """Document numbers of uids (-1 for a uid this generation does not hold)."""
        uids = np.asarray(uids, dtype=np.int64)
        if not len(self.uids):
            return np.full(len(uids), -1, np.int64)
        pos = np.searchsorted(self.uids, uids, sorter=self._uid_order)
        pos = np.minimum(pos, len(self.uids) - 1)
        found = self._uid_order[pos]
        return np.where(self.uids[found] == uids, found, -1)

    def live_ids(self) -> list[str]:
        return [self.ids[d] for d in np.flatnonzero(self.live).tolist()]


class UidRetriever:
    """tantivy / Lucene hits come as (uid, score): map them to this generation's live docnos."""

    def __init__(self, inner, segments: Segments):
        self.inner, self.segments = inner, segments
        self.name = inner.name
        self.num_docs = inner.num_docs

    def encode(self, query: str):
        return self.inner.encode(query)

    def search_rep(self, rep, k: int, allow: np.ndarray | None = None) -> list[tuple[int, float]]:
        """Top k live documents; with `allow` (a mask over docnos) only allowed ones: the backend
        is asked for more until k pass or it has no more."""
        visible = self.segments.live if allow is None else allow
        depth = k
        while True:
            hits = self.inner.search_rep(rep, depth)
            if not hits:
                return []
            docnos = self.segments.docnos_of_uids([u for u, _ in hits])
            # the backend's own deletes match the generation's; the live check is belt and braces
            out = [(int(d), s) for d, (_, s) in zip(docnos, hits) if d >= 0 and visible[d]]
            if len(out) >= k or len(hits) < depth or depth >= self.num_docs:
                return out[:k]
            depth = min(depth * 4, max(self.num_docs, 1))

    def search(self, query: str, k: int) -> list[tuple[int, float]]:
        return self.search_rep(self.encode(query), k)

    def __getattr__(self, name):
        return getattr(self.inner, name)


class MultiDense:
    """Dense retrieval over every segment's FAISS index; a document scores by its best passage."""

    def __init__(self, parts: list, segments: Segments, encoder=None):
        """`parts`: one DenseSearcher per segment (None where a segment has no vectors)."""
        self.parts, self.segments, self.encoder = parts, segments, encoder

    @property
    def dim(self):
        return next((p.index.d for p in self.parts if p is not None), None)

    def encode(self, query: str) -> np.ndarray:
        return self.encoder.encode_queries([query])[0]

    def encode_many(self, queries: list[str]) -> list[np.ndarray]:
        return list(self.encoder.encode_queries(queries)) if queries else []

    def _segment_top(self, i: int, q: np.ndarray, k: int, allow=None) -> list[tuple[int, float]]:
        part, offset = self.parts[i], self.segments.offsets[i]
        n = part.index.ntotal if part is not None else 0
        if n == 0:
            return []
        live = (self.segments.live if allow is None else allow)[offset:offset + self.segments.entries[i]["docs"]]
        if not live.any():
            return []
        want = min(k, int(live.sum()))
        depth = min(n, max(k, 1) * (4 if part.multi or not live.all() else 1))
        while True:
            scores, rows = part.index.search(q[None].astype(np.float32), depth)
            valid = rows[0] >= 0
            docs, sc = part.owner[rows[0][valid]], scores[0][valid]
            keep = live[docs]
            docs, sc = docs[keep], sc[keep]
            # rows come best first, so a document's first row is its best passage
            uniq, first = np.unique(docs, return_index=True)
            if len(uniq) >= want or depth >= n:
                break
            depth = min(n, depth * 4)
        return [(int(d) + offset, float(sc[f])) for d, f in zip(uniq, first)]

    def search_vectors(self, qvecs: np.ndarray, k: int, allow=None) -> list[list[tuple[int, float]]]:
        out = []
        for q in qvecs:
            cand = [h for i in range(len(self.parts)) for h in self._segment_top(i, q, k, allow)]
            if not cand:
                out.append([])
                continue
            docs = np.array([d for d, _ in cand], dtype=np.int64)
            vals = np.array([s for _, s in cand], dtype=np.float64)
            out.append(top_k(docs, vals, k))
        return out

    def search_rep(self, qvec: np.ndarray, k: int, allow=None) -> list[tuple[int, float]]:
        return self.search_vectors(qvec[None], k, allow)[0]

    def search(self, query: str, k: int) -> list[tuple[int, float]]:
        return self.search_rep(self.encode(query), k)

    def passage_scores(self, qvec: np.ndarray, docno: int):
        """(cosine of each of the document's vectors to the query, their character spans or None)."""
        s, r = self.segments.locate(docno)
        if self.parts[s] is None:
            return np.zeros(0), None
        return self.parts[s].passage_scores(qvec, r)

    def best_passage(self, qvec: np.ndarray, docnos: list[int]) -> np.ndarray:
        out = np.full(len(docnos), -1.0)
        by_seg: dict[int, list[int]] = {}
        for j, d in enumerate(docnos):
            by_seg.setdefault(self.segments.locate(d)[0], []).append(j)
        for s, js in by_seg.items():
            if self.parts[s] is None:
                continue
            local = [docnos[j] - self.segments.offsets[s] for j in js]
            out[js] = self.parts[s].best_passage(qvec, local)
        return out


class MultiSparseIndex:
    """Learned-sparse scores over every segment (a term weight needs no corpus statistics)."""

    def __init__(self, parts: list, segments: Segments):
        self.parts, self.segments = parts, segments

    def score(self, q_terms, q_weights) -> np.ndarray:
        out = np.zeros(self.segments.rows, dtype=np.float32)
        for part, offset, e in zip(self.parts, self.segments.offsets, self.segments.entries):
            if part is not None:
                out[offset:offset + e["docs"]] = part.score(q_terms, q_weights)
        out[self.segments.deleted] = 0
        return out

    def top_k(self, q_terms, q_weights, k: int, allow=None) -> list[tuple[int, float]]:
        scores = self.score(q_terms, q_weights)
        if allow is not None:
            scores[~allow] = 0
        return top_k_dense(scores, k)

    def doc_score(self, docno: int, q_terms, q_weights) -> float:
        s, r = self.segments.locate(docno)
        return self.parts[s].doc_score(r, q_terms, q_weights) if self.parts[s] is not None else 0.0

    def doc_vector(self, docno: int):
        s, r = self.segments.locate(docno)
        return self.parts[s].doc_vector(r)


class MultiSparse:
    def __init__(self, index: MultiSparseIndex, encoder=None):
        self.index, self.encoder = index, encoder

    def encode(self, query: str):
        return self.encode_many([query])[0]

    def encode_many(self, queries: list[str]) -> list:
        if not queries:
            return []
        return self.encoder.query_terms(queries)

    def search_rep(self, rep, k: int, allow=None) -> list[tuple[int, float]]:
        return self.index.top_k(rep[0], rep[1], k, allow)

    def search(self, query: str, k: int) -> list[tuple[int, float]]:
        return self.search_rep(self.encode(query), k)
