"""LlamaIndex: `LdrRetriever`, a `BaseRetriever` returning `NodeWithScore`s of the best passages.

    from ldr.integrations.llamaindex import LdrRetriever
    retriever = LdrRetriever(index="idx", k=4, passages=2)          # or url="http://127.0.0.1:8080"
    nodes = retriever.retrieve("when can the licence be terminated?")
    nodes[0].node.text, nodes[0].score, nodes[0].node.metadata["doc_id"]
"""
from __future__ import annotations

from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeRelationship, NodeWithScore, QueryBundle, RelatedNodeInfo, TextNode

from ..errors import QueryError
from .source import document_records, open_source, passage_records, search_options

# LlamaIndex's filter operators that ldr's filters express (ldr/search/filters.py), and their negations
_OPS = {"==": "=", "!=": "!=", ">": ">", ">=": ">=", "<": "<", "<=": "<=", "in": "=", "nin": "!="}
_NEGATED = {"==": "!=", "!=": "==", ">": "<=", ">=": "<", "<": ">=", "<=": ">", "in": "nin", "nin": "in"}


_NOTHING = "\x00"


def _literal(v):
    """A value matched as it is: ldr reads * ? [ in an `=` value as a glob, LlamaIndex never does."""
    import glob

    return glob.escape(v) if isinstance(v, str) else v


def ldr_filters(filters) -> dict | None:
    """LlamaIndex `MetadataFilters` (ExactMatchFilter, MetadataFilter with ==, !=, <, <=, >, >=,
    in, nin; conditions joined by AND, or under NOT: none of them holds) as ldr's filter dict; a mapping
    passes as it is. Values are matched literally (no globs). Conditions on one key are joined
    (two `in` lists: the values in both; `>=` beside `in`: both hold). What ldr cannot express
    (OR, NOT over a comparison, contains, text match, nested filters) is a clear error, never
    ignored."""
    if filters is None or isinstance(filters, dict):
        return filters
    from llama_index.core.vector_stores.types import FilterCondition, MetadataFilters

    if not isinstance(filters, MetadataFilters):
        raise QueryError(f"filters must be a mapping or LlamaIndex MetadataFilters, not {type(filters).__name__}")
    # NOT, as LlamaIndex's own stores read it: none of the filters matches (each negated, all joined)
    negate = filters.condition == FilterCondition.NOT
    if len(filters.filters) > 1 and filters.condition not in (None, FilterCondition.AND, FilterCondition.NOT):
        raise QueryError(f"ldr's filters join conditions with AND; {filters.condition.value} is not supported")
    out: dict = {}
    for f in filters.filters:
        if isinstance(f, MetadataFilters):
            raise QueryError("nested MetadataFilters are not supported by ldr's filters")
        op = getattr(f.operator, "value", f.operator)
        if op not in _OPS:
            raise QueryError(f"the filter operator {op!r} (on {f.key!r}) is not supported by ldr's filters; "
                             f"supported: {', '.join(_OPS)}")
        if negate:
            if op in ("<", "<=", ">", ">="):     # NOT(year >= 2020) holds where year is missing; year < 2020 does not
                raise QueryError(f"NOT over {op} (on {f.key!r}) is not supported by ldr's filters (a document "
                                 f"without {f.key!r} would be answered differently); give the opposite comparison")
            op = _NEGATED[op]
        _join(out.setdefault(f.key, {}), f.key, op, f.value)
    return out


def _join(cond: dict, key: str, op: str, value) -> None:
    """Add `key op value` to the conditions already on `key` (all must hold)."""
    if op in ("in", "nin"):
        if not isinstance(value, (list, tuple)):
            raise QueryError(f"the filter {key!r} {op} takes a list of values (got {value!r})")
        values = [_literal(v) for v in value]
    else:
        values = [_literal(value)]
    ldr_op = _OPS[op]
    if ldr_op == "=":       # equal to one of them, and to one of any earlier list: their intersection
        cond["="] = values if "=" not in cond else [v for v in cond["="] if v in values]
        if not cond["="]:   # no value is in both: nothing matches (equal to it and not equal to it)
            cond["="] = [_NOTHING]
            cond["!="] = list(dict.fromkeys([*cond.get("!=", []), _NOTHING]))
    elif ldr_op == "!=":    # equal to none of them
        cond["!="] = list(dict.fromkeys([*cond.get("!=", []), *values]))
    elif ldr_op in cond:
        raise QueryError(f"two {op} conditions on {key!r}: give the tighter one")
    else:
        cond[ldr_op] = value


class LdrRetriever(BaseRetriever):
    """`k` documents, `passages` passages each: one TextNode per passage (id "DOC#START-END",
    its document as SOURCE relationship, offsets as start/end_char_idx), in hit order, each hit's
    passages best first; a node's score is its passage's. `passages=0`: a node of each document's
    whole text. `per_document=True`: one node per document (id = the document's id, as
    RetrieverEvaluator's expected ids are; its passages joined in the document's order, score the
    document's)."""

    def __init__(self, index=None, *, url: str | None = None, api_key: str | None = None, k: int = 4,
                 passages: int = 1, filters: dict | None = None, min_score: float | None = None,
                 per_document: bool = False, search_kwargs: dict | None = None, **kwargs):
        """`min_score`: drop documents whose calibrated relevance (0-1) is below it."""
        super().__init__(**kwargs)
        self._source = open_source(index, url, api_key)
        self.k, self.passages, self.filters, self.min_score = k, passages, ldr_filters(filters), min_score
        self.per_document = per_document
        self.search_kwargs = dict(search_kwargs or {})

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        # search_kwargs are any search options (ldr.search.options.QueryOptions), winning over k etc.
        options = {"k": self.k, "passages": self.passages, "filters": self.filters, "min_score": self.min_score,
                   **self.search_kwargs}
        hits = self._source.search(query_bundle.query_str, **search_options(options))
        generation = getattr(hits, "generation", None)
        out = []
        for r in (document_records if self.per_document else passage_records)(hits):
            score = self._score(r)
            md = {**r["metadata"], "generation": generation}
            node = TextNode(id_=r["id"], text=r["text"], metadata=md, start_char_idx=md["start"], end_char_idx=md["end"],
                            # the numbers stay out of what an LLM or embedder is shown of the node
                            excluded_llm_metadata_keys=["doc_score", "doc_rank", "relevance", "start", "end", "stage", "generation",
                                                        "passages", "passage_score"],
                            excluded_embed_metadata_keys=list(md))
            node.relationships[NodeRelationship.SOURCE] = RelatedNodeInfo(node_id=md["doc_id"])
            out.append(NodeWithScore(node=node, score=score))
        return out

    def _score(self, record: dict) -> float:
        """A passage node scores its document's relevance (0-1: LlamaIndex's similarity cutoffs read
        scores as similarities, and a passage's own score, a weighted sum, passed 1); its passage
        score stays in the metadata (`passage_score`), its order in the list."""
        if self.per_document or record["metadata"].get("relevance") is None:
            return record["score"]
        record["metadata"]["passage_score"] = record["score"]
        return float(record["metadata"]["relevance"])

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        # in a worker thread: concurrent aretrieve calls overlap, the event loop stays free
        import asyncio

        return await asyncio.to_thread(self._retrieve, query_bundle)
