"""LangChain: `LdrRetriever`, a `BaseRetriever` returning the best documents as their best passages,
and `LdrVectorStore`, a `VectorStore` over an index that may start empty.

    from ldr.integrations.langchain import LdrRetriever
    retriever = LdrRetriever(index="idx", k=4, passages=2)          # or url="http://127.0.0.1:8080"
    docs = retriever.invoke("when can the licence be terminated?")  # 4 Documents, k as LangChain counts
    docs[0].page_content, docs[0].metadata["doc_id"], docs[0].metadata["passages"][0]["start"]
"""
from __future__ import annotations

import os
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.vectorstores import VectorStore
from pydantic import ConfigDict, PrivateAttr

from .source import document_records, open_source, passage_records, search_options


def _single_vector_retriever(index):
    """The index's query side that encodes a text as one vector, or None."""
    if not hasattr(index, "query_side"):
        return None
    return next((s for s in map(index.query_side, index.retriever_names) if getattr(s, "single_vector", False)), None)


def _relevance(hit) -> float:
    return float(hit.relevance) if getattr(hit, "relevance", None) is not None else 0.0


class LdrRetriever(BaseRetriever):
    """`k` LangChain Documents, one per hit, best first: its `passages` best passages in the
    document's order, joined by a line holding "…" (`passages=0`: the document's whole text).
    Metadata: doc_id, title, score, relevance, start/end (the best passage), passages (each one's
    start, end, score, stage and page in a PDF), the document's own metadata.
    `per_passage=True`: one Document per passage instead (k x passages of them, id "DOC#START-END")."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    index: Any = None            # an ldr.Index or an index directory
    url: str | None = None       # or a running `ldr serve`
    api_key: str | None = None
    k: int = 4
    passages: int = 1
    per_passage: bool = False
    filters: dict | None = None
    min_score: float | None = None   # drop documents whose calibrated relevance is below (0-1)
    search_kwargs: dict = {}     # any search option: mode, fusion, weights, rerank, ... (they win over k etc.)
    _source: Any = PrivateAttr(default=None)

    def model_post_init(self, __context: Any) -> None:
        self._source = open_source(self.index, self.url, self.api_key)

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun,
                                **kwargs: Any) -> list[Document]:
        # search_kwargs are any search options (ldr.search.options.QueryOptions) and win over the
        # fields above: search_kwargs={"k": 2} is k=2, not a clash; options passed to one call
        # (`retriever.invoke(q, k=1, filters={...}, mode="bm25")`) win over both
        options = {"k": self.k, "passages": self.passages, "filters": self.filters, "min_score": self.min_score,
                   **self.search_kwargs, **kwargs}
        per_passage = options.pop("per_passage", self.per_passage)
        hits = self._source.search(query, **search_options(options))
        generation = getattr(hits, "generation", None)
        records = passage_records(hits) if per_passage else document_records(hits)
        return [Document(page_content=r["text"], id=r["id"],
                         metadata={**r["metadata"], "score": r["score"], "generation": generation})
                for r in records]

    async def _aget_relevant_documents(self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun,
                                       **kwargs: Any) -> list[Document]:
        # in a worker thread: a search never blocks the caller's event loop, and takes the same options
        import asyncio

        return await asyncio.to_thread(self._get_relevant_documents, query, run_manager=run_manager.get_sync(),
                                       **kwargs)


class LdrVectorStore(VectorStore):
    """A LangChain `VectorStore` over an ldr index (a local one: it writes), which may start empty.

        store = LdrVectorStore("idx")                     # opens idx, or creates it empty
        ids = store.add_documents(docs)                   # ids kept (or made), an existing id replaced
        store.similarity_search("...", k=4, filter={"lang": "de"})
        store.as_retriever(search_kwargs={"k": 4})

    ldr encodes with the index's own models (a hybrid of BM25, dense and learned sparse by default),
    so no `embedding` is taken: `from_texts(texts, embedding=None, path=...)` ignores one given.
    A search returns each hit's Document as it was added (its whole text and metadata, as
    LangChain's suite asks); the score a `similarity_search_with_score` or
    `..._with_relevance_scores` pair carries is the calibrated relevance (0-1, comparable across
    queries: a threshold on it means the same for every query; ldr's ranking score, which orders
    one list and gives its top hit 1.0, is LdrRetriever's "score").
    `max_marginal_relevance_search` (and `as_retriever(search_type="mmr")`) reorders the best
    `fetch_k` hits by MMR over the index's own dense model (an index without one says so).
    `delete()` with no ids deletes every document, as LangChain's stores do.
    `build_options` (at creation): BuildConfig fields, e.g. dense=None for BM25 alone."""

    def __init__(self, index=None, *, build_options: dict | None = None, **search_options: Any):
        from .. import sharded
        from ..api import Index
        from ..index.view import holds_index

        if isinstance(index, str) and index.startswith(("http://", "https://")):
            raise TypeError("LdrVectorStore writes to a local index (an index directory or ldr.Index); for a "
                            "running `ldr serve`, use LdrRetriever(url=...) to search it")
        if isinstance(index, (str, os.PathLike)):
            index = sharded.open(index) if holds_index(Path(index)) else Index.create(index, **(build_options or {}))
        if not hasattr(index, "add"):
            raise TypeError("LdrVectorStore needs an ldr.Index or an index directory (it adds and deletes)")
        self.index, self.search_options = index, search_options

    @property
    def embeddings(self):
        return None                  # the index encodes with its own models

    def add_texts(self, texts: Iterable[str], metadatas: list[dict] | None = None, *, ids: list[str] | None = None,
                  **kwargs: Any) -> list[str]:
        from ..corpus import Doc

        texts = list(texts)
        ids = [str(i) if i is not None else uuid.uuid4().hex for i in (ids or [None] * len(texts))]
        metadatas = metadatas or [{} for _ in texts]
        if not (len(ids) == len(texts) == len(metadatas)):
            raise ValueError(f"{len(texts)} texts, {len(ids)} ids and {len(metadatas)} metadatas: give as many of each")
        last = {i: n for n, i in enumerate(ids)}          # an id given twice: its last text wins
        docs = [Doc(i, texts[n], "", dict(metadatas[n] or {})) for i, n in last.items()]
        if docs:
            self.index.add(docs)
        return ids

    def add_documents(self, documents: list[Document], **kwargs: Any) -> list[str]:
        ids = kwargs.pop("ids", None) or [d.id for d in documents]
        return self.add_texts([d.page_content for d in documents], [d.metadata for d in documents], ids=ids, **kwargs)

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool | None:
        if ids is None:             # LangChain's contract: no ids, every document
            ids = self.index.live_ids()
        if not ids:
            return True
        self.index.delete([str(i) for i in ids])
        return True

    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        out = []
        for i in ids:
            try:
                doc = self.index.document(str(i))
            except KeyError:
                continue
            out.append(Document(page_content=doc.text, metadata=dict(doc.meta), id=doc.id))
        return out

    def _search(self, query: str, k: int, filter: dict | None, **kwargs: Any):
        options = {**self.search_options, **kwargs, "passages": 0, "with_text": True}
        if filter:
            options["filters"] = filter
        hits = self.index.search(query, k=k, **options)
        return [(Document(page_content=h.text, metadata=dict(h.meta or {}), id=h.id), h) for h in hits]

    def similarity_search(self, query: str, k: int = 4, filter: dict | None = None, **kwargs: Any) -> list[Document]:
        return [d for d, _ in self._search(query, k, filter, **kwargs)]

    def similarity_search_with_score(self, query: str, k: int = 4, filter: dict | None = None,
                                     **kwargs: Any) -> list[tuple[Document, float]]:
        return [(d, _relevance(h)) for d, h in self._search(query, k, filter, **kwargs)]

    def _similarity_search_with_relevance_scores(self, query: str, k: int = 4, **kwargs: Any):
        filter = kwargs.pop("filter", None)
        return [(d, _relevance(h)) for d, h in self._search(query, k, filter, **kwargs)]

    def max_marginal_relevance_search(self, query: str, k: int = 4, fetch_k: int = 20, lambda_mult: float = 0.5,
                                      filter: dict | None = None, **kwargs: Any) -> list[Document]:
        """The best `fetch_k` hits reordered by maximal marginal relevance (LangChain's own
        function) over vectors of the index's dense model: the query's and each hit's best
        passage's. An index without a dense component cannot: a clear error."""
        import numpy as np
        from langchain_core.vectorstores.utils import maximal_marginal_relevance

        from ..errors import ConfigError

        vectors = _single_vector_retriever(self.index)
        if vectors is None:
            raise ConfigError("max_marginal_relevance_search needs the index's dense vectors: this index has no "
                              "dense component (BM25 or sparse only); use similarity_search, or build with dense")
        options = {**self.search_options, **kwargs, "passages": 1, "with_text": True}
        if filter:
            options["filters"] = filter
        hits = list(self.index.search(query, k=fetch_k, **options))
        if not hits:
            return []
        texts = [h.passages[0].text if h.passages else (h.text or h.title) for h in hits]
        vecs = np.asarray(vectors.encode_many([query, *texts]), dtype=np.float32)
        chosen = maximal_marginal_relevance(vecs[0], list(vecs[1:]), lambda_mult=lambda_mult, k=k)
        return [Document(page_content=hits[i].text, metadata=dict(hits[i].meta or {}), id=hits[i].id) for i in chosen]

    @classmethod
    def from_texts(cls, texts: list[str], embedding=None, metadatas: list[dict] | None = None, *,
                   ids: list[str] | None = None, path=None, index=None, **kwargs: Any) -> "LdrVectorStore":
        """A store at `path` (created empty if it holds no index) or over `index`, with `texts` added."""
        if index is None and path is None:
            raise ValueError("LdrVectorStore.from_texts/from_documents needs path= (the index directory to open or "
                             "create) or index= (an ldr.Index); ldr encodes with the index's own models, so "
                             "embedding may be None")
        store = cls(index if index is not None else path, **kwargs)
        store.add_texts(texts, metadatas, ids=ids)
        return store
