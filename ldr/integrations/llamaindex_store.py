"""LlamaIndex: `LdrVectorStore`, a vector store over an ldr index (which may start empty), so that
`VectorStoreIndex.from_vector_store`, `insert`, `as_retriever`, `as_query_engine` and
`delete_ref_doc` run on ldr's own search.

    from llama_index.core import StorageContext, VectorStoreIndex
    from ldr.integrations.llamaindex_store import NO_EMBEDDING, LdrVectorStore

    store = LdrVectorStore("idx")                                       # opens idx, or creates it empty
    index = store.as_index()        # = VectorStoreIndex.from_vector_store(store, embed_model=NO_EMBEDDING)
    index.insert(document)          # or VectorStoreIndex.from_documents(docs, embed_model=NO_EMBEDDING,
    nodes = index.as_retriever(similarity_top_k=4).retrieve("...")   #   storage_context=StorageContext
    index.delete_ref_doc(document.doc_id)                               #   .from_defaults(vector_store=store))

ldr encodes with the index's own models (BM25, dense and learned sparse by default), so the store
asks LlamaIndex for no query embedding (`is_embedding_query = False`) and ignores node embeddings.
LlamaIndex still embeds what is inserted with its embed_model (OpenAI's unless told, which needs
a network and a key): NO_EMBEDDING (LlamaIndex's MockEmbedding, one dimension) costs nothing and
is never used for ranking. A node's text and metadata are stored as
given, its source document's id under the metadata key `ref_doc_id` (what `delete` removes by).
A result's similarity is the hit's calibrated relevance (0-1, comparable across queries).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from llama_index.core.schema import BaseNode, NodeRelationship, RelatedNodeInfo, TextNode
from llama_index.core.vector_stores.types import BasePydanticVectorStore, VectorStoreQuery, VectorStoreQueryResult
from pydantic import PrivateAttr

from ..errors import QueryError
from .llamaindex import _literal, ldr_filters

REF = "ref_doc_id"


def _no_embedding():
    from llama_index.core.embeddings import MockEmbedding

    return MockEmbedding(embed_dim=1)


NO_EMBEDDING = _no_embedding()


class LdrVectorStore(BasePydanticVectorStore):
    stores_text: bool = True
    is_embedding_query: bool = False
    flat_metadata: bool = False
    _index: Any = PrivateAttr(default=None)
    _options: dict = PrivateAttr(default_factory=dict)

    def __init__(self, index=None, *, build_options: dict | None = None, **search_options: Any):
        """`index`: an ldr.Index or an index directory (created empty with `build_options`, BuildConfig
        fields, when it holds none); `search_options`: any ldr search option for every query."""
        super().__init__()
        from ..api import Index
        from ..index.view import holds_index

        if isinstance(index, (str, os.PathLike)):
            index = Index(index) if holds_index(Path(index)) else Index.create(index, **(build_options or {}))
        if not hasattr(index, "add") or not hasattr(index, "ids_where"):
            raise TypeError("LdrVectorStore needs an ldr.Index or an index directory (a local, unsharded index: it "
                            "adds and deletes)")
        self._index, self._options = index, dict(search_options)

    def as_index(self, **kwargs: Any):
        """A LlamaIndex VectorStoreIndex over this store (no embedding model: ldr encodes)."""
        from llama_index.core import VectorStoreIndex

        return VectorStoreIndex.from_vector_store(self, embed_model=kwargs.pop("embed_model", NO_EMBEDDING), **kwargs)

    @classmethod
    def class_name(cls) -> str:
        return "LdrVectorStore"

    @property
    def client(self):
        return self._index

    def add(self, nodes: list[BaseNode], **kwargs: Any) -> list[str]:
        from ..corpus import Doc

        docs = []
        for n in nodes:
            meta = dict(n.metadata or {})
            if n.ref_doc_id is not None:
                meta[REF] = n.ref_doc_id
            docs.append(Doc(n.node_id, n.get_content(), "", meta))
        if docs:
            self._index.add(docs)
        return [n.node_id for n in nodes]

    def delete(self, ref_doc_id: str, **kwargs: Any) -> None:
        """Every node of the source document `ref_doc_id`."""
        try:
            ids = self._index.ids_where({REF: {"=": [_literal(ref_doc_id)]}})
        except QueryError:          # no node has a source document yet
            return
        if ids:
            self._index.delete(ids)

    def delete_nodes(self, node_ids: list[str] | None = None, filters=None, **kwargs: Any) -> None:
        ids = list(node_ids or [])
        if filters is not None:
            matched = set(self._index.ids_where(ldr_filters(filters)))
            ids = [i for i in ids if i in matched] if node_ids else sorted(matched)
        if ids:
            self._index.delete(ids)

    def clear(self) -> None:
        ids = self._index.live_ids()
        if ids:
            self._index.delete(ids)

    def get_nodes(self, node_ids: list[str] | None = None, filters=None, **kwargs: Any) -> list[BaseNode]:
        ids = node_ids if node_ids is not None else self._index.live_ids()
        if filters is not None:
            matched = set(self._index.ids_where(ldr_filters(filters)))
            ids = [i for i in ids if i in matched]
        out = []
        for i in ids:
            try:
                doc = self._index.document(str(i))
            except KeyError:
                continue
            out.append(_node(doc.id, doc.text, doc.meta))
        return out

    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        if not query.query_str:
            raise QueryError("ldr searches by the query's text: this query has none (a query by embedding only "
                             "cannot be answered by ldr's own models)")
        options = {**self._options, **kwargs, "passages": 0, "with_text": True}
        if query.filters is not None:
            options["filters"] = ldr_filters(query.filters)
        if query.node_ids:
            options["filters"] = {**(options.get("filters") or {}), "id": [_literal(i) for i in query.node_ids]}
        hits = self._index.search(query.query_str, k=query.similarity_top_k, **options)
        nodes = [_node(h.id, h.text, h.meta) for h in hits]
        return VectorStoreQueryResult(nodes=nodes, ids=[h.id for h in hits],
                                      similarities=[float(h.relevance) if h.relevance is not None else 0.0
                                                    for h in hits])


def _node(doc_id: str, text: str | None, meta: dict | None) -> TextNode:
    meta = dict(meta or {})
    ref = meta.pop(REF, None)
    node = TextNode(id_=doc_id, text=text or "", metadata=meta)
    if ref is not None:
        node.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=str(ref))
    return node
