"""The one top-k rule every stage uses: highest score first, equal scores by `tiebreak[docno]`
(the document's id when the caller has the ids, else the docno), without sorting all."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class IdOrder:
    """Equal scores broken by document id, so that a ranking depends neither on indexing order nor
    on how segments were assembled, without ranking every id of the index: sorting a million ids
    cost 1.8 s of a cold search. `order[docno]` is the id itself; `order[docnos]` (an array) is the
    rank of each among those given, which orders them as their ids do."""

    def __init__(self, ids: Sequence[str]):
        self.ids = ids

    def __getitem__(self, docnos):
        if isinstance(docnos, (int, np.integer)):
            return self.ids[int(docnos)]
        docnos = np.asarray(docnos, dtype=np.int64)
        take = getattr(self.ids, "take", None)       # an Arrow column reads them in one call
        keys = np.array(take(docnos) if take is not None else [self.ids[d] for d in docnos.tolist()], dtype=object)
        rank = np.empty(len(keys), dtype=np.int64)
        rank[np.argsort(keys, kind="stable")] = np.arange(len(keys))
        return rank


def top_k(docs: np.ndarray, vals: np.ndarray, k: int, tiebreak=None) -> list[tuple[int, float]]:
    """The k best (docno, score) of parallel arrays."""
    docs, vals = top_k_arrays(docs, vals, k, tiebreak)
    return list(zip(docs.tolist(), vals.tolist()))


def top_k_arrays(docs: np.ndarray, vals: np.ndarray, k: int, tiebreak=None) -> tuple[np.ndarray, np.ndarray]:
    """top_k as (docnos, scores) arrays, best first."""
    if k <= 0 or not len(docs):
        return docs[:0], vals[:0]
    if len(docs) > k:
        keep = np.argpartition(-vals, k - 1)[:k]
        # every document tied with the cut-off score competes on the tie-break, as in a full sort
        cut = vals[keep].min()
        keep = np.union1d(keep, np.flatnonzero(vals == cut))
        docs, vals = docs[keep], vals[keep]
    if tiebreak is not None and not _tied(vals):
        order = np.argsort(-vals, kind="stable")[:k]     # no equal scores: the tie-break orders nothing
    else:
        order = np.lexsort((docs if tiebreak is None else tiebreak[docs], -vals))[:k]
    return docs[order], vals[order]


def _tied(vals: np.ndarray) -> bool:
    """Some two of `vals` are equal (ranking them needs the tie-break: the ids, read and sorted)."""
    s = np.sort(vals)
    return bool(np.any(s[1:] == s[:-1]))


def top_k_dense(scores: np.ndarray, k: int, tiebreak=None) -> list[tuple[int, float]]:
    """The k best documents of a score per document, skipping documents that scored 0."""
    # a bool mask's nonzero: 1.0 ms at a million documents, a float array's 3.2 ms (bench/README.md)
    hit = np.flatnonzero(scores != 0)
    return top_k(hit, scores[hit], k, tiebreak)


def top_k_dense_arrays(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """top_k_dense as (docnos, scores) arrays, best first (equal scores by docno)."""
    hit = np.flatnonzero(scores != 0)
    return top_k_arrays(hit, scores[hit], k)


# up to this many documents a block's rows are ranked by one sort of the whole block: a row's
# argpartition, cut-off ties and sort cost ~20 us of numpy calls, a 32 x 162 block's sort 3-5 us a
# row; past ~500 documents a row's partition is cheaper than a sort (bench/README.md)
SORT_WHOLE_BLOCK = 512


def top_k_dense_block(block: np.ndarray, k: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """top_k_dense_arrays of each row of a (queries, documents) block of scores."""
    if block.shape[1] > SORT_WHOLE_BLOCK or not block.size or k <= 0 or block.min() < 0:
        return [top_k_dense_arrays(row, k) for row in block]
    # with no negative score, a stable sort by falling score puts every nonzero score first, in
    # the order top_k_arrays gives (equal scores by docno); the zeros follow and are cut off
    order = np.argsort(-block, axis=1, kind="stable")
    keep = np.minimum(np.count_nonzero(block, axis=1), k).tolist()
    return [(docs, row[docs]) for row, docs in zip(block, (o[:n] for o, n in zip(order, keep)))]


def top_k_dict(scores: dict, k: int, tiebreak=None) -> list[tuple[int, float]]:
    if not scores:
        return []
    docs = np.fromiter(scores.keys(), dtype=np.int64, count=len(scores))
    vals = np.fromiter(scores.values(), dtype=np.float64, count=len(scores))
    return top_k(docs, vals, k, tiebreak)
