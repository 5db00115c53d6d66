"""The one top-k rule every stage uses: highest score first, equal scores by `tiebreak[docno]`
(the rank of the document's id when the caller has it, else the docno), without sorting all."""
from __future__ import annotations

import numpy as np


def top_k(docs: np.ndarray, vals: np.ndarray, k: int, tiebreak=None) -> list[tuple[int, float]]:
    """The k best (docno, score) of parallel arrays."""
    if k <= 0 or not len(docs):
        return []
    if len(docs) > k:
        keep = np.argpartition(-vals, k - 1)[:k]
        # every document tied with the cut-off score competes on the tie-break, as in a full sort
        cut = vals[keep].min()
        keep = np.union1d(keep, np.flatnonzero(vals == cut))
        docs, vals = docs[keep], vals[keep]
    order = np.lexsort((docs if tiebreak is None else np.asarray(tiebreak)[docs], -vals))[:k]
    return [(int(d), float(v)) for d, v in zip(docs[order], vals[order])]


def top_k_dense(scores: np.ndarray, k: int, tiebreak=None) -> list[tuple[int, float]]:
    """The k best documents of a score per document, skipping documents that scored 0."""
    hit = np.flatnonzero(scores)
    return top_k(hit, scores[hit], k, tiebreak)


def top_k_dict(scores: dict, k: int, tiebreak=None) -> list[tuple[int, float]]:
    if not scores:
        return []
    docs = np.fromiter(scores.keys(), dtype=np.int64, count=len(scores))
    vals = np.fromiter(scores.values(), dtype=np.float64, count=len(scores))
    return top_k(docs, vals, k, tiebreak)
