"""The offline second stage: rescore the top candidates at passage level with the installed
models. Each searched retriever gives one exact feature per candidate (its `exact_scores`):
  dense   best-passage cosine (max over the document's passage vectors in the FAISS index),
  sparse  Σ w_q·w_d over the document's full learned-sparse vector,
  bm25    the document's BM25 score (0 when BM25 did not return it), ...
Each feature is z-normalised over the candidate set and combined with the fusion weights.
"""
from __future__ import annotations

import numpy as np

from ..search.normalise import zscore
from ..search.stages.rerank import Candidate, Query


class PassageRescorer:
    name = "passage"
    reads_text = False

    def __init__(self, weights: dict[str, float] | None = None, retrievers: dict | None = None):
        """`weights`: the search's fusion weights (every kind has one; None: equal);
        `retrievers`: {kind: reader} of the searched kinds."""
        self.weights = weights
        self.retrievers = retrievers or {}

    def passages_wanted(self, override: int | None) -> int:
        return 0

    def features(self, query: Query, candidates: list[Candidate]) -> dict[str, np.ndarray]:
        docnos = [c.docno for c in candidates]
        feats = {}
        for name, retriever in self.retrievers.items():
            if hasattr(retriever, "exact_scores"):
                first = {c.docno: c.first_stage[name] for c in candidates if name in c.first_stage}
                feats[name] = retriever.exact_scores(query.rep(name), docnos, first)
        return feats

    def rescore(self, query: Query, candidates: list[Candidate]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        feats = self.features(query, candidates)
        total = np.zeros(len(candidates))
        for name, vals in feats.items():
            w = 1.0 if self.weights is None else self.weights[name]
            total += w * zscore(np.asarray(vals, dtype=np.float64))
        return total, feats
