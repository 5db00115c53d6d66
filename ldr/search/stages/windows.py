"""The window stage: the top `depth` rows rescored by their best window,
(1 - w)·minmax(the score before) + w·minmax(the BM25 of the document's best window among these
candidates' windows). A long document matching the query in one place beats one matching it
thinly everywhere (qmsum-train +3.1 nDCG@10 held out, bench/README.md); rows below the depth keep
their order under every rescored one. Its score is `scores["windows"]`, the evidence
`scores["windows.best"]`."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...stages import Stage, detail
from ..normalise import minmax
from .base import Candidates, QuerySource

BEST = detail(Stage.WINDOWS, "best")


@dataclass(frozen=True)
class Windows:
    depth: int
    weight: float
    side = "coordinator"
    name = Stage.WINDOWS.value

    def needs(self) -> int:
        return self.depth

    def describe(self) -> str:
        return f"top {self.depth} rescored by their best window's BM25, weight {self.weight:g}"

    def run(self, cands: Candidates, source: QuerySource) -> Candidates:
        if not cands.rows:
            return cands
        with cands.timed(self.name):
            head, tail = cands.rows[:self.depth], cands.rows[self.depth:]
            docnos = [d for d, _, _ in head]
            best = source.best_windows(docnos)
            w = self.weight
            window = np.asarray([best[d] for d in docnos])
            first = np.asarray([sc for _, sc, _ in head], dtype=np.float64)
            lo, span = first.min(), first.max() - first.min()
            final = (1 - w) * minmax(first) + w * minmax(window)
            out = [(d, float(final[i]), dict(st, **{BEST: float(window[i]), self.name: float(final[i])}))
                   for i, (d, _, st) in enumerate(head)]
            tiebreak = source.tiebreak()
            out.sort(key=lambda r: (-r[1], r[0] if tiebreak is None else tiebreak[r[0]]))
            # the rows below keep their order on the same scale, under every rescored one
            # (a reranker mixes these scores)
            for d, sc, st in tail:
                v = (1 - w) * (sc - lo) / span if span > 0 else sc - lo
                out.append((d, float(v), dict(st, **{self.name: float(v)})))
            cands.rows = out
            cands.runs[self.name] = {d: s for d, s, _ in out}
        return cands
