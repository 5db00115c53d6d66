"""One generation of an index, read consistently: its segments and their deletions (each
component's retriever over them lives in ldr/components/).

Document numbers ("docnos") of a snapshot are global: segment i's rows follow segment i-1's.
Deleted rows keep their number but never come out of a retriever or count as documents.
"""
from __future__ import annotations

import bisect
import json
import threading
from pathlib import Path

import numpy as np
import pyarrow as pa

from ..components.topk import IdOrder
from ..corpus import Doc
from ..errors import IndexFormatError
from .docstore import Docstore
from .docstore_columns import StringColumn
from .manifest import check_uids
from ..paths import inside
from .segment import read_deletes


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
        # read on access, as each store's (a search reads a few dozen of a million)
        def joined(name):
            if len(self.stores) == 1:                   # the common case after a merge: no copy
                return getattr(self.stores[0], name)
            arrays = [getattr(s, name).array for s in self.stores]
            return StringColumn(pa.concat_arrays(arrays) if arrays else pa.nulls(0, pa.string()))
        self.ids, self.titles = joined("ids"), joined("titles")
        self.uids = np.concatenate([s.uids for s in self.stores]) if self.stores else np.zeros(0, np.int64)
        check_uids(root, manifest, self.uids)
        self.count = int(self.live.sum())
        if self.count != manifest["doc_count"]:
            raise IndexFormatError(f"{root}: the segments hold {self.count} live documents, the manifest says "
                                   f"{manifest['doc_count']}; run `ldr check` and rebuild the index")
        self._row_of: dict[str, int] | None = None     # built at the first lookup by id: a search needs none
        self._uid_order = np.argsort(self.uids, kind="stable")
        self._id_order = IdOrder(self.ids)
        self._meta: list[dict] | None = None
        self._masks: dict = {}
        self._meta_lock = threading.RLock()

    # -- what the search pipeline uses -------------------------------------------------
    def __len__(self) -> int:
        return self.count

    @property
    def row_of(self) -> dict[str, int]:
        """{id: docno} of the live documents, checked for an id held twice (never written by ldr)."""
        if self._row_of is None:
            ids = list(self.ids)
            row_of = {ids[d]: d for d in np.flatnonzero(self.live).tolist()}
            if len(row_of) != self.count:
                raise IndexFormatError(f"{self.root}: two live documents share an id; run `ldr check` and rebuild "
                                       "the index")
            self._row_of = row_of
        return self._row_of

    def __contains__(self, doc_id: str) -> bool:
        return doc_id in self.row_of

    def row(self, doc_id: str) -> int:
        return self.row_of[doc_id]

    @property
    def id_order(self) -> IdOrder:
        """Ties in score are broken by id: a ranking depends neither on indexing order nor on how
        segments were assembled."""
        return self._id_order

    def locate(self, docno: int) -> tuple[int, int]:
        s = bisect.bisect_right(self.offsets, docno) - 1
        return s, docno - self.offsets[s]

    def text(self, docno: int) -> str:
        s, r = self.locate(docno)
        return self.stores[s].text(r)

    def _by_store(self, docnos: list[int], read) -> dict[int, object]:
        by: dict[int, list[int]] = {}
        for d in docnos:
            by.setdefault(self.locate(d)[0], []).append(d)
        out = {}
        for s, ds in by.items():
            out.update(zip(ds, read(self.stores[s], [d - self.offsets[s] for d in ds])))
        return out

    def texts(self, docnos: list[int]) -> dict[int, str]:
        """{docno: text}, one docstore read per segment (not one per document)."""
        return self._by_store(list(dict.fromkeys(docnos)), lambda st, rows: st.texts(rows))

    def doc_metas(self, docnos: list[int]) -> dict[int, Doc]:
        """{docno: its metadata, source and path (a Doc without its text)}, one docstore read per segment."""
        return self._by_store(list(dict.fromkeys(docnos)), lambda st, rows: st.meta_docs(rows))

    def meta(self, docno: int) -> dict:
        s, r = self.locate(docno)
        return self.stores[s].meta(r)

    def doc(self, docno: int) -> Doc:
        s, r = self.locate(docno)
        return self.stores[s].doc(r)

    # -- metadata filters ----------------------------------------------------------------
    def all_meta(self) -> list[Doc]:
        """Per docno, a text-less Doc with the user's metadata and ldr's source and path."""
        with self._meta_lock:   # read once per generation, on the first filtered search
            if self._meta is None:
                self._meta = [m for s in self.stores for m in s.all_meta()]
        return self._meta

    def meta_codes(self) -> tuple[np.ndarray, list[dict]]:
        """(a code per docno, the distinct metadata the codes name): each distinct metadata parsed
        once (Arrow dictionary-encodes each segment's JSON column), computed once per generation.
        Facets, the field list and filters on the user's fields read these instead of a Doc per row."""
        return self.cached("meta-codes", _meta_codes)

    def meta_counts(self) -> list[tuple[dict, int]]:
        """(metadata, live documents holding exactly it) per distinct metadata."""
        codes, metas = self.meta_codes()
        counts = np.bincount(codes[self.live], minlength=len(metas))
        return [(metas[i], int(n)) for i, n in enumerate(counts.tolist()) if n]

    def meta_fields(self) -> set[str]:
        """The user's metadata fields."""
        return {name for m in self.meta_codes()[1] for name in m}

    def cached_mask(self, k: str, compute) -> np.ndarray:
        """A mask over docnos cached under key `k` for this generation (the search side computes
        filter masks, ldr/search/filters.py); at most 64 kept."""
        return self.cached("mask:" + k, compute)

    def cached(self, k: str, compute):
        """`compute(self)` cached under key `k` for this generation (a generation never changes:
        filter masks, the metadata fields' counts); at most 64 kept. Callers do not mutate it."""
        with self._meta_lock:
            got = self._masks.get(k)
            if got is None:
                got = compute(self)
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
        ids = list(self.ids)
        return [ids[d] for d in np.flatnonzero(self.live).tolist()]


def _meta_codes(segments: Segments) -> tuple[np.ndarray, list[dict]]:
    import pyarrow.compute as pc

    codes, metas, index = [], [], {}
    for store, start in zip(segments.stores, segments.offsets):
        col = store.meta_column()
        if col is None:         # a docstore older than the source column: its Docs say the metadata
            docs = segments.all_meta()[start:start + len(store)]
            codes.append(np.arange(len(metas), len(metas) + len(docs), dtype=np.int64))
            metas.extend(d.meta or {} for d in docs)
            continue
        enc = pc.dictionary_encode(col.combine_chunks(), null_encoding="encode")
        ours = []
        for v in enc.dictionary.to_pylist():     # a value seen in an earlier segment keeps its code
            if v not in index:
                index[v] = len(metas)
                metas.append(json.loads(v) if v else {})
            ours.append(index[v])
        ours = np.array(ours, dtype=np.int64)
        codes.append(ours[_int_view(enc.indices)] if len(ours) else np.zeros(0, np.int64))
    return (np.concatenate(codes) if codes else np.zeros(0, np.int64)), metas


def _int_view(a) -> np.ndarray:
    """An Arrow integer array without nulls as a numpy view of its buffer (pyarrow's to_numpy
    imports pandas, which a search's cold path never loads)."""
    dtype = np.dtype(f"int{a.type.bit_width}")
    return np.frombuffer(a.buffers()[1], dtype=dtype, count=len(a), offset=a.offset * dtype.itemsize)
