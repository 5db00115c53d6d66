"""The offline second stage: rescore the top candidates at passage level with the installed
models. Each retriever of the query gives one exact feature per candidate (its `exact_scores`):
  dense   best-passage cosine (max over the document's passage vectors in the FAISS index),
  sparse  Σ w_q·w_d over the document's full learned-sparse vector,
  bm25    the document's BM25 score (0 when BM25 did not return it), ...
Each feature is z-normalised over the candidate set and combined with weights.
"""
from __future__ import annotations

import numpy as np

DEFAULT_WEIGHTS = {"bm25": 1.0, "dense": 1.0, "sparse": 1.0}


def zscore(x: np.ndarray) -> np.ndarray:
    sd = x.std()
    return (x - x.mean()) / sd if sd > 0 else np.zeros_like(x)


class PassageRescorer:
    name = "passage"

    def __init__(self, weights: dict[str, float] | None = None):
        self.weights = dict(DEFAULT_WEIGHTS if weights is None else weights)

    def features(self, ctx, docnos: list[int]) -> dict[str, np.ndarray]:
        feats = {}
        for name, retriever in ctx.retrievers.items():
            if name in ctx.first_stage and hasattr(retriever, "exact_scores"):
                feats[name] = retriever.exact_scores(ctx.rep(name), docnos, ctx.first_stage[name])
        return feats

    def rescore(self, ctx, docnos: list[int]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        feats = self.features(ctx, docnos)
        total = np.zeros(len(docnos))
        for name, vals in feats.items():
            total += self.weights.get(name, 0.0) * zscore(np.asarray(vals, dtype=np.float64))
        return total, feats
