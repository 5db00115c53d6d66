"""The relevance stage: each candidate's calibrated relevance (search/calibration.py), an
estimate of P(relevant) that does not depend on the other candidates; `min_score` drops the
candidates below it. It orders nothing: the hits keep the ranking of the stages before.
Its score is `scores["relevance"]`, its features `scores["relevance.<feature>"]`: with a query
fit, BM25's z-score in the query's scores over the index (`bm25.z`), BM25 over the index's
best (`bm25.best`) and `cover` (the largest share of the query's terms two
neighbouring windows hold: all of a quoted sentence's make it an exact match); with the first
fits, each kind's score over its bound, or as it is."""
from __future__ import annotations

import logging
from dataclasses import dataclass

from ...errors import QueryError
from ...stages import Stage, detail
from .. import calibration
from .base import Candidates, QuerySource

log = logging.getLogger(__name__)
_WARNED: set[int] = set()     # index sizes a min_score was warned about (once a process each)


@dataclass(frozen=True)
class Relevance:
    names: tuple[str, ...]            # the kinds the first fit reads: one feature each
    fit: dict = None                  # the first fit (search/calibration.py), None where none applies
    min_score: float | None = None
    query_fit: dict | None = None     # the query fit, where this index gives what it reads
    k: int | None = None              # the hits the search returns: no later row needs an estimate
    own: dict | None = None           # the index's recalibration on its user's labels (`ldr tune --relevance`)
    side = "coordinator"
    name = Stage.RELEVANCE.value

    def __hash__(self):
        return hash((self.names, self.min_score, self.k, (self.own or {}).get("at")))

    def needs(self) -> int:
        return 0

    @property
    def distributions(self) -> tuple[str, ...]:
        """The kinds whose scores over the whole index the query fit reads (the first stages bring them)."""
        return tuple((self.query_fit or {}).get("reads", ()))

    def describe(self) -> str:
        cut = f"; hits below {self.min_score:g} dropped" if self.min_score is not None else ""
        rule = calibration.exact()
        floor = (f", at least {rule['p']:g} where one window holds every term of a query of {rule['min_words']}+ words"
                 if rule else "")
        how = f"{' and '.join(self.fit['weights'])} over their bounds" if self.fit else ""
        if self.query_fit:
            first = f"{' and '.join(self.query_fit['weights'])} (the query's scores over the index)"
            how = first + (f"; below {calibration.min_docs()} documents, {how}" if how else "")
        own = (f"; recalibrated on {self.own['queries']} judged queries of {self.own.get('data', 'the user')}"
               f" ({self.own['estimate']} estimate)" if self.own else "")
        return f"calibrated P(relevant) from {how}{floor}{own}{cut}"

    def run(self, cands: Candidates, source: QuerySource) -> Candidates:
        if not cands.rows:
            return cands
        with cands.timed(self.name):
            dists = cands.distributions
            use_query = self.query_fit is not None and all(
                dists.get(k, {}).get("n", 0) >= calibration.min_docs() for k in self.query_fit["reads"])
            if self.min_score is not None and self.query_fit is not None and not use_query and self.own is None:
                small_index_cut(min(dists.get(k, {}).get("n", 0) for k in self.query_fit["reads"]))
            long_query = calibration.exact() is not None and len(source.query.split()) >= calibration.exact()["min_words"]
            bounds = {n: cands.bounds.get(n) for n in self.names}     # the first fit's, where it serves a row
            out, windows, at = [], {}, 0
            for d, sc, st in cands.rows:
                if self.k is not None and len(out) >= self.k:
                    break           # the plan keeps k rows: the rest need no estimate (nor their windows)
                if (use_query or long_query) and d not in windows:
                    # the window evidence of the next rows together (the window stage read most already)
                    ahead = [r[0] for r in cands.rows[at:at + max(self.k or 10, 10)] if r[0] not in windows]
                    windows.update({e: None for e in ahead})
                    windows.update(source.covers(ahead))
                at += 1
                cover = windows.get(d)
                p, x, used = self._estimate({**cands.first_stage(d), **st}, dists, cover, bounds, use_query)
                if p is None:       # no estimate applies to this index (too few documents for the query fit)
                    if self.min_score is not None:
                        raise QueryError(f"min_score needs a calibrated relevance, and this index's is fitted for "
                                         f"indexes of {calibration.min_docs()} documents or more: search without it")
                    out.append((d, sc, st))
                    continue
                p = max(p, calibration.exact()["p"]) if calibration.is_exact(source.query, cover) else p
                shipped = p
                if self.own is not None and self.own["estimate"] == used:
                    p = own_relevance(self.own, p, x, cover)
                if self.min_score is None or p >= self.min_score:
                    extra = {detail(Stage.RELEVANCE, n): v for n, v in x.items()}
                    if shipped != p:
                        extra[detail(Stage.RELEVANCE, "shipped")] = shipped
                    if cover is not None:
                        extra[detail(Stage.RELEVANCE, calibration.COVER)] = cover
                    out.append((d, sc, dict(st, **extra, **{self.name: p})))
            cands.rows = out
        return cands

    def _estimate(self, scores: dict, dists: dict, cover, bounds: dict, use_query: bool):
        """(P(relevant), its features, "query" or "first") by the query fit where it applies (its
        cover known), else the first fit."""
        if use_query and cover is not None:
            x = calibration.query_features(self.query_fit, scores, dists, cover)
            if x is not None:
                return calibration.relevance(x, self.query_fit), x, "query"
        if self.fit is None:
            return None, {}, None
        x = calibration.features(scores, bounds, self.names)
        return calibration.relevance(x, self.fit), x, "first"


def own_relevance(own: dict, p: float, x: dict, cover: float | None = None) -> float:
    """The shipped estimate `p` recalibrated on the index's labels: sigmoid(a·logit(p) + b + Σ w·x)
    over its features `x` (and the window `cover`; eval/relevance_fit.py)."""
    import math

    q = min(max(p, 1e-4), 1 - 1e-4)
    x = dict(x, **({calibration.COVER: cover} if cover is not None else {}))
    z = own["a"] * math.log(q / (1 - q)) + own["b"] + sum(w * float(x.get(n, 0.0)) for n, w in own.get("weights", {}).items())
    z = max(min(z, 30.0), -30.0)
    return 1 / (1 + math.exp(-z))


def small_index_cut(documents: int) -> None:
    """`min_score` on an index under the query fit's minimum drops right answers (issue 78: a
    first-hour trial's --min-score 0.5 returned nothing for 5 of 10 questions ranked right): said
    once a process, in the log every interface shows."""
    if documents and documents not in _WARNED:
        _WARNED.add(documents)
        log.warning("min_score on an index of %s", calibration.small_index_note(documents))
