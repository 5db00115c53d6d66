"""A query's read access to one pinned generation of an index (the `QuerySource` the plan's
stages read through): its retrievers, the docstore's texts (read together, kept for the query),
the query's representation per kind (encoded once), and the passage finder."""
from __future__ import annotations

from typing import Any, Callable


class IndexSource:
    def __init__(self, query: str, retriever: Callable[[str], Any], store, allow=None, finder=None,
                 reps: dict | None = None):
        """`retriever(kind)`: the generation's loaded reader of a kind; `store`: its docstore
        (Segments); `allow`: the filters' mask over docnos (None: every document); `finder`: a
        PassageFinder (None: no passages); `reps`: query representations already computed
        (a batch search encodes its queries together)."""
        self.query = query
        self._retriever = retriever
        self.store = store
        self.allow = allow
        self.finder = finder
        self.reps = dict(reps or {})
        self.read: dict[int, str] = {}

    def retriever(self, kind: str):
        return self._retriever(kind)

    def rep(self, kind: str):
        """The query as `kind` scores it: encoded on the kind's query side before the shard is asked
        (a text, for a kind whose reader makes its own terms: made here)."""
        if kind not in self.reps:
            raise KeyError(f"the query was not encoded for {kind!r}: a search encodes it once, on its query side")
        rep = self.reps[kind]
        own = getattr(self.retriever(kind), "encode", None) if isinstance(rep, str) else None
        return own(rep) if own is not None else rep

    def search(self, kind: str, rep, depth: int) -> list:
        r = self.retriever(kind)
        return r.search_rep(rep, depth) if self.allow is None else r.search_rep(rep, depth, allow=self.allow)

    def distribution(self, kind: str, rep) -> dict | None:
        """The query's score distribution over the whole generation (sums: n, sum, sumsq, max), where
        the kind's reader gives one (native BM25), else None."""
        get = getattr(self.retriever(kind), "score_distribution", None)
        return get(rep) if get is not None else None

    def score_bound(self, kind: str, rep) -> float | None:
        """The highest score `kind` can give the query `rep` (BM25: every term saturated, with the
        statistics `rep` scores with: this shard's own, or the whole index's), None when it has no
        such bound (a cosine is its own scale)."""
        bound = getattr(self.retriever(kind), "bound", None)
        return bound(rep) if bound is not None else None

    def tiebreak(self):
        return self.store.id_order

    def prefetch(self, docnos) -> None:
        """Read the texts of `docnos` not read yet, together (a docstore read per document costs
        ~0.5 ms of fixed overhead: the most of a window stage over uncached candidates)."""
        want = [d for d in docnos if d not in self.read]
        if want:
            self.read.update(self.store.texts(want))

    def text(self, docno: int) -> str:
        if docno not in self.read:
            self.read[docno] = self.store.text(docno)
        return self.read[docno]

    def meta(self, docnos: list[int]) -> dict:
        return {d: doc.meta for d, doc in self.store.doc_metas(docnos).items()}

    def _keys(self, docnos) -> dict:
        return {d: int(self.store.uids[d]) for d in docnos}

    def release(self) -> None:
        """Drop the texts read (a result keeps its candidates' scores, not their texts)."""
        self.read.clear()
