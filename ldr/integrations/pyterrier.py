"""PyTerrier: `LdrRetrieve`, a `pt.Transformer` from queries (qid, query) to a ranking (qid,
query, docno, score, rank), so ldr composes in PyTerrier pipelines and `pt.Experiment`.

    import pyterrier as pt
    from ldr.integrations.pyterrier import LdrRetrieve
    retr = LdrRetrieve("idx", k=100)                      # any search option: mode="bm25", rerank=...
    pt.Experiment([retr, retr % 10], topics, qrels, eval_metrics=["map", "ndcg_cut_10"])
"""
from __future__ import annotations

import pandas as pd
import pyterrier as pt

from .source import open_source


class LdrRetrieve(pt.Transformer):
    def __init__(self, index=None, *, url: str | None = None, api_key: str | None = None, k: int = 1000,
                 text: bool = False, **search_options):
        """`text=True`: each row also carries the document's `text` (for a re-ranker downstream)."""
        self.source = open_source(index, url, api_key)
        self.k, self.text, self.search_options = k, text, search_options

    def transform(self, topics: pd.DataFrame) -> pd.DataFrame:
        pt.validate.query_frame(topics, extra_columns=["query"])
        rows = []
        for qid, query in zip(topics["qid"], topics["query"]):
            hits = self.source.search(str(query), k=self.k, passages=0, with_text=self.text, **self.search_options)
            for h in hits:
                row = {"qid": qid, "query": query, "docno": h.id, "score": float(h.score), "rank": h.rank - 1}
                if self.text:
                    row["text"] = h.text
                rows.append(row)
        columns = ["qid", "query", "docno", "score", "rank"] + (["text"] if self.text else [])
        return pd.DataFrame(rows, columns=columns)
