"""What a second stage takes and gives: a query and its candidates in, one score per candidate
(and named features) out. A reranker never sees the plan or the index: the rerank stage
(ldr/search/stages/rerank.py) reads what the reranker says it needs (texts, passages) and hands
them over in `Candidate`s."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, runtime_checkable

import numpy as np


@dataclass
class Query:
    text: str
    rep: Callable[[str], Any]        # the query's representation for a retriever kind (encoded once)
    windows: int | None = None       # the search's `rerank_windows` (None: the reranker's own setting)


@dataclass
class Candidate:
    docno: int
    first_stage: dict[str, float] = field(default_factory=dict)   # each retriever's score (absent: not returned)
    text: str | None = None          # the document's text, when the reranker reads texts
    passages: list[str] = field(default_factory=list)   # its best passages, in document order


@runtime_checkable
class Reranker(Protocol):
    name: str
    reads_text: bool                 # the stage reads each candidate's text for it

    def passages_wanted(self, override: int | None) -> int:
        """Best passages per candidate it scores (0: none); `override`: the search's setting."""
        ...

    def rescore(self, query: Query, candidates: list[Candidate]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """(one score per candidate, {feature: one value per candidate})."""
        ...
