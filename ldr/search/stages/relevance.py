"""The relevance stage: each candidate's calibrated relevance (search/calibration.py), an
estimate of P(relevant) that does not depend on the other candidates; `min_score` drops the
candidates below it. It orders nothing: the hits keep the ranking of the stages before.
Its score is `scores["relevance"]`, its features `scores["relevance.<kind>"]` (each kind's score
over its bound, or as it is) and `scores["relevance.cover"]` (the largest share of the query's
terms one window holds: all of a quoted sentence's make it an exact match)."""
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
    side = "coordinator"
    name = Stage.RELEVANCE.value

    def __hash__(self):
        return hash((self.names, self.min_score))

    def needs(self) -> int:
        return 0

    def describe(self) -> str:
        cut = f"; hits below {self.min_score:g} dropped" if self.min_score is not None else ""
        rule = calibration.exact()
        floor = (f", at least {rule['p']:g} where one window holds every term of a query of {rule['min_words']}+ words"
                 if rule else "")
        return f"calibrated P(relevant) from {' and '.join(self.fit['weights'])}{floor}{cut}"

    def run(self, cands: Candidates, source: QuerySource) -> Candidates:
        if not cands.rows:
            return cands
        with cands.timed(self.name):
            bounds = {n: source.score_bound(n) for n in self.names}
            windows = {}
            if calibration.exact() is not None and len(source.query.split()) >= calibration.exact()["min_words"]:
                # the window evidence (the window stage read it already for its depth)
                windows = source.best_windows([d for d, _, _ in cands.rows])
            out = []
            for d, sc, st in cands.rows:
                x = calibration.features({**cands.first_stage(d), **st}, bounds, self.names)
                cover = (windows.get(d) or {}).get(calibration.COVER)
                p = calibration.relevance(x, self.fit, calibration.is_exact(source.query, cover))
                if self.min_score is None or p >= self.min_score:
                    extra = {detail(Stage.RELEVANCE, n): v for n, v in x.items()}
                    if cover is not None:
                        extra[detail(Stage.RELEVANCE, calibration.COVER)] = cover
                    out.append((d, sc, dict(st, **extra, **{self.name: p})))
            cands.rows = out
        return cands
