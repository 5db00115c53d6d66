"""The relevance stage: each candidate's calibrated relevance (search/calibration.py), an
estimate of P(relevant) that does not depend on the other candidates; `min_score` drops the
candidates below it. It orders nothing: the hits keep the ranking of the stages before.
Its score is `scores["relevance"]`, its features `scores["relevance.<feature>"]` (a lexical kind's
share of its bound, a vector kind's z-score, `cover`, `cover_doc`: search/calibration.py)."""
from __future__ import annotations

from dataclasses import dataclass

from ...stages import Stage, detail
from .. import calibration
from .base import Candidates, QuerySource


@dataclass(frozen=True)
class Relevance:
    names: tuple[str, ...]            # the kinds the fit reads: one feature each
    fit: dict = None                  # the fitted coefficients (search/calibration.py)
    min_score: float | None = None
    null: tuple = ()                  # ((vector kind, (mean, std) of its model's unrelated scores), ...)
    side = "coordinator"
    name = Stage.RELEVANCE.value

    def __hash__(self):
        return hash((self.names, self.min_score, self.null))

    def needs(self) -> int:
        return 0

    def describe(self) -> str:
        cut = f"; hits below {self.min_score:g} dropped" if self.min_score is not None else ""
        return f"calibrated P(relevant) from {' and '.join(self.fit['weights'])}{cut}"

    def run(self, cands: Candidates, source: QuerySource) -> Candidates:
        if not cands.rows:
            return cands
        with cands.timed(self.name):
            bounds = {n: source.score_bound(n) for n in self.names}
            windows = {}
            if any(f in self.fit["weights"] for f in calibration.WINDOW_FEATURES):
                windows = source.best_windows([d for d, _, _ in cands.rows])   # read by the window stage
            null = dict(self.null)
            out = []
            for d, sc, st in cands.rows:
                x = calibration.features({**cands.first_stage(d), **st}, bounds, self.names, windows.get(d), null)
                p = calibration.relevance(x, self.fit)
                if self.min_score is None or p >= self.min_score:
                    extra = {detail(Stage.RELEVANCE, n): v for n, v in x.items()}
                    out.append((d, sc, dict(st, **extra, **{self.name: p})))
            cands.rows = out
        return cands
