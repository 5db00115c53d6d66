"""The query's vocabulary: the name of every stage a plan can hold, used alike by a hit's
scores, a search's timings, `ldr eval`'s runs and reports, and the names a retriever kind may not
take. Imports nothing from ldr (every layer may use it)."""
from __future__ import annotations

from enum import Enum


class Stage(str, Enum):
    """A plan's stages after the first (a first stage is named by its retriever kind: bm25,
    dense, ...). A stage's score of a candidate is `scores[stage]`; what it measured on the way
    (a best window's BM25, a reranker's own score, its features) is `scores["stage.what"]`."""

    FUSED = "fused"          # the first stages' lists fused (hybrid search)
    WINDOWS = "windows"      # the top candidates rescored by their best window
    RERANKED = "reranked"    # a second stage (cross-encoder, passage rescorer, a kind's exact scores)
    RELEVANCE = "relevance"  # each hit's calibrated P(relevant): orders nothing, `min_score` cuts on it
    PASSAGES = "passages"    # each hit's best passages (no score of its own)

    def __str__(self) -> str:
        return self.value


HYBRID = "hybrid"   # the mode that runs every retriever of an index, fused
ENCODE = "encode"   # a search's timings: `encode.<kind>`, the time its query took to encode for a kind

# a retriever kind named like a stage, the hybrid mode or a timing would overwrite its scores
RESERVED = frozenset({s.value for s in Stage} | {HYBRID, ENCODE})


def detail(stage: Stage, what: str) -> str:
    """The key of what `stage` measured besides its score ("windows.best", "reranked.raw")."""
    return f"{stage.value}.{what}"
