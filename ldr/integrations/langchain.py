"""LangChain: `LdrRetriever`, a `BaseRetriever` returning the best documents as their best passages.

    from ldr.integrations.langchain import LdrRetriever
    retriever = LdrRetriever(index="idx", k=4, passages=2)          # or url="http://127.0.0.1:8080"
    docs = retriever.invoke("when can the licence be terminated?")  # 4 Documents, k as LangChain counts
    docs[0].page_content, docs[0].metadata["doc_id"], docs[0].metadata["passages"][0]["start"]
"""
from __future__ import annotations

from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, PrivateAttr

from .source import document_records, open_source, passage_records, search_options


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
