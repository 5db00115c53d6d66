"""PyTerrier: `LdrRetrieve`, a `pt.Transformer` from queries (qid, query) to a ranking (qid,
query, docno, score, rank), so ldr composes in PyTerrier pipelines and `pt.Experiment`; its
`text_loader()` adds document fields by docno, as PyTerrier's own indexes do, so a text
re-ranker (`pt.text.get_text(retr, "text")`, or `retr >> retr.text_loader() >> reranker`) runs on
ldr's documents.

    import pyterrier as pt
    from ldr.integrations.pyterrier import LdrRetrieve
    retr = LdrRetrieve("idx", k=100)                      # any search option: mode="bm25", rerank=...
    pt.Experiment([retr, retr % 10], topics, qrels, eval_metrics=["map", "ndcg_cut_10"])
    pipeline = retr % 20 >> retr.text_loader(["title", "text"]) >> my_text_reranker
    LdrRetrieve("idx", passage=True)                      # each row's best passage, for passage re-rankers
"""
from __future__ import annotations

import pandas as pd
import pyterrier as pt

from .source import open_source


class LdrRetrieve(pt.Transformer):
    def __init__(self, index=None, *, url: str | None = None, api_key: str | None = None, k: int = 1000,
                 text: bool = False, title: bool = False, passage: bool = False, **search_options):
        """`text=True`: each row also carries the document's `text`; `title=True` its `title`;
        `passage=True` its best passage (`passage`, with `passage_start`/`passage_end` offsets)."""
        self.source = open_source(index, url, api_key)
        self.k, self.text, self.title, self.passage = k, text, title, passage
        self.search_options = search_options

    def transform(self, topics: pd.DataFrame) -> pd.DataFrame:
        pt.validate.query_frame(topics, extra_columns=["query"])
        rows = []
        for qid, query in zip(topics["qid"], topics["query"]):
            hits = self.source.search(str(query), k=self.k, passages=1 if self.passage else 0, with_text=self.text,
                                      **{"relevance": False, **self.search_options})     # rows hold no relevance
            for h in hits:
                row = {"qid": qid, "query": query, "docno": h.id, "score": float(h.score), "rank": h.rank - 1}
                if self.title:
                    row["title"] = h.title
                if self.text:
                    row["text"] = h.text
                if self.passage:
                    best = h.passages[0] if h.passages else None
                    row.update(passage=best.text if best else "", passage_start=best.start if best else 0,
                               passage_end=best.end if best else 0)
                rows.append(row)
        columns = ["qid", "query", "docno", "score", "rank"] + (["title"] if self.title else []) \
            + (["text"] if self.text else []) + (["passage", "passage_start", "passage_end"] if self.passage else [])
        return pd.DataFrame(rows, columns=columns)

    def text_loader(self, fields: str | list[str] = "text", **kwargs) -> pt.Transformer:
        """A transformer adding each row's document `fields` (text, title, or a metadata field) by
        its docno: PyTerrier's text_loader convention, which `pt.text.get_text` calls."""
        return _TextLoader(self.source, [fields] if isinstance(fields, str) else list(fields))


class _TextLoader(pt.Transformer):
    def __init__(self, source, fields: list[str]):
        self.source, self.fields = source, fields

    def transform(self, frame: pd.DataFrame) -> pd.DataFrame:
        if "docno" not in frame.columns:
            raise ValueError("text_loader needs a docno column (the output of a retriever)")
        cache: dict = {}
        values = {f: [] for f in self.fields}
        for docno in frame["docno"]:
            if docno not in cache:
                d = self.source.document(str(docno))
                cache[docno] = {"text": d.text, "title": d.title, **(d.meta or {})}
            for f in self.fields:
                values[f].append(cache[docno].get(f))
        return frame.assign(**values)
