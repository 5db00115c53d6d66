"""The ranking of the first stages' lists: one kind's own list, or several fused
(ldr/search/fusion.py); the top `keep` rows go on, every fused score is kept for `ldr eval`."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...components import topk as top_k
from ...stages import Stage
from .. import fusion
from .base import Candidates, QuerySource, strictly_falling


@dataclass(frozen=True)
class Fuse:
    kinds: tuple[str, ...]
    method: str
    weights: tuple[tuple[str, float], ...]     # (kind, weight) of every kind fused
    rrf_k: int
    keep: int                                  # rows the later stages need
    fused: bool = True                         # False: one kind asked for alone (its own ranking)
    side = "coordinator"
    name = Stage.FUSED.value

    def needs(self) -> int:
        return 0

    def describe(self) -> str:
        if not self.fused:
            return f"{self.kinds[0]}'s own ranking, top {self.keep}"
        w = ", ".join(f"{k}={v:g}" for k, v in self.weights)
        k = f" k={self.rrf_k}" if self.method == "rrf" else ""
        return f"{self.method}{k}, weights {w}; top {self.keep} go on"

    def ranked(self, cands: Candidates, tiebreak) -> list:
        """The (docno, score) rows a ranking that is not fused keeps: its kind's own list, ties
        broken by `tiebreak` (the rows run() gives, without their {kind: score})."""
        listed = cands.lists[self.kinds[0]]
        # a list in score order with no equal scores is in the tie-break's order too
        return top_k.top_k_dict(cands.runs[self.kinds[0]], self.keep, tiebreak) \
            if tiebreak is not None and not strictly_falling(listed, self.keep + 1) else listed[:self.keep]

    def run(self, cands: Candidates, source: QuerySource) -> Candidates:
        tiebreak = source.tiebreak()
        if not self.fused:
            kind = self.kinds[0]
            cands.rows = [(d, sc, {kind: sc}) for d, sc in self.ranked(cands, tiebreak)]
            return cands
        with cands.timed(self.name):
            runs = [cands.runs[k] for k in self.kinds]
            keys, s = fusion.matrix(runs)
            order = None if tiebreak is None else (lambda: tiebreak[np.asarray(keys, dtype=np.int64)])
            scores = fusion.combine(fusion.columns(s, self.method, self.rrf_k, order), [w for _, w in self.weights])
            fused = dict(zip(keys, scores.tolist()))
            cands.runs[self.name] = fused
            cands.rows = [(d, sc, {**{k: r[d] for k, r in zip(self.kinds, runs) if d in r}, self.name: sc})
                          for d, sc in top_k.top_k_dict(fused, self.keep, tiebreak)]
        return cands
