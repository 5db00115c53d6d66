"""The window stage: the top `depth` rows rescored by their best windows,
(1 - w)·minmax(the score before) + w·evidence, where the evidence is
(1 - v)·minmax(the BM25 of the document's best window among these candidates' windows)
+ v·(the vector kinds' best-window similarities, each min-max normalised, mixed by their fusion
weights). A long document matching the query in one place beats one matching it thinly
everywhere (qmsum-train +3.1 nDCG@10 held out, bench/README.md); rows below the depth keep their
order under every rescored one. Its score is `scores["windows"]`, the evidence
`scores["windows.best"]` (BM25) and `scores["windows.<kind>"]` (a vector kind's best window).

With `scales` ((S, share), ...) the BM25 evidence is taken from windows of S analysed terms (each
half overlapping the next, BM25 among the candidates' windows of that size), each min-max
normalised and mixed by its share, instead of from the vector kinds' passages: `scores["windows.tS"]`
(window_scales.py; English's default: qmsum-train +0.9 nDCG@10 held out, +1.25 on all queries).

With `phrases` (u) the rescored rows end as (1 - u)·minmax(that score) + u·minmax(the BM25 of the
query's ordered term pairs among the candidates): `scores["windows.phrases"]` (phrases.py;
English's default 0.3: qmsum-train +1.40 held out over the window scales alone).

With `aspects` (a) they then end as (1 - a)·minmax(that score) + a·minmax(the sum over the query's
sentences of each one's best window among the candidates): `scores["windows.aspects"]` (aspects.py;
English's default 0.4: qmsum-train +0.72 held out over the phrases)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...stages import Stage, detail
from ..aspects import KEY as ASPECTS
from ..normalise import minmax
from ..phrases import KEY as PHRASES
from ..window_scales import scale_key
from .base import Candidates, QuerySource

BEST = detail(Stage.WINDOWS, "best")


@dataclass(frozen=True)
class Windows:
    depth: int
    weight: float
    vectors: float = 0.0                    # the vector kinds' share of the evidence (0: BM25 alone)
    term_kind: str = "bm25"                 # the lexical kind whose windows' BM25 is the evidence
    vector_weights: tuple = ()              # ((kind, its fusion weight), ...) of the searched vector kinds
    scales: tuple = ()                      # ((terms a window, its share), ...): the BM25 evidence's windows
    phrases: float = 0.0                    # the share of the query's ordered term pairs (phrases.py) in the end
    aspects: float = 0.0                    # the share of the query's sentences' best windows (aspects.py) after it
    side = "coordinator"
    name = Stage.WINDOWS.value

    def needs(self) -> int:
        return self.depth

    def describe(self) -> str:
        if self.vectors >= 1:
            by = "vector similarity"
        elif self.vectors > 0:
            by = f"BM25 and vector similarity ({self.vectors:g} vectors)"
        else:
            by = "BM25"
        if self.scales and self.vectors < 1:
            by += " (windows of " + ", ".join(f"{n} terms x{w:g}" for n, w in self.scales) + ")"
        ph = f", then phrases x{self.phrases:g}" if self.phrases > 0 else ""
        ph += f", then aspects x{self.aspects:g}" if self.aspects > 0 else ""
        return f"top {self.depth} rescored by their best window's {by}, weight {self.weight:g}{ph}"

    def evidence(self, best: dict, docnos: list[int]) -> tuple[np.ndarray, dict]:
        """(each row's window evidence in [0, 1], {score key: the raw best-window scores})."""
        terms = np.asarray([best[d].get(self.term_kind, 0.0) for d in docnos], dtype=np.float64)
        raw = {BEST: terms}
        lexical = minmax(terms)
        if self.sizes():
            lexical = np.zeros(len(docnos))
            for size, share in self.scales:
                col = np.asarray([best[d].get(scale_key(size), 0.0) for d in docnos], dtype=np.float64)
                raw[detail(Stage.WINDOWS, scale_key(size))] = col
                lexical += share * minmax(col)
            lexical /= sum(share for _, share in self.scales)
        if self.vectors <= 0:
            return lexical, raw
        mixed, total = np.zeros(len(docnos)), 0.0
        for kind, w in self.vector_weights:
            col = np.asarray([best[d].get(kind, np.nan) for d in docnos], dtype=np.float64)
            if w <= 0 or np.isnan(col).all():
                continue
            raw[detail(Stage.WINDOWS, kind)] = col
            mixed += w * minmax(np.nan_to_num(col), ~np.isnan(col))
            total += w
        if total == 0:          # no vector kind placed windows: the BM25 evidence alone
            return lexical, raw
        return (1 - self.vectors) * lexical + self.vectors * mixed / total, raw

    def sizes(self) -> tuple:
        """The window sizes the evidence reads (none where the vector kinds' similarity is all of it)."""
        return tuple(n for n, _ in self.scales) if self.vectors < 1 else ()

    def mix(self, first: np.ndarray, evidence: np.ndarray) -> np.ndarray:
        """The rescored rows' scores: (1 - w)·minmax(the score before) + w·evidence."""
        return (1 - self.weight) * minmax(first) + self.weight * evidence

    def run(self, cands: Candidates, source: QuerySource) -> Candidates:
        if not cands.rows:
            return cands
        with cands.timed(self.name):
            head, tail = cands.rows[:self.depth], cands.rows[self.depth:]
            docnos = [d for d, _, _ in head]
            best = source.best_windows(docnos, self.sizes(), self.phrases > 0, self.aspects > 0)
            evidence, raw = self.evidence(best, docnos)
            w = self.weight
            first = np.asarray([sc for _, sc, _ in head], dtype=np.float64)
            lo, span = first.min(), first.max() - first.min()
            final = self.mix(first, evidence)
            if self.phrases > 0 and any(PHRASES in best.get(d, {}) for d in docnos):   # a long enough query
                pairs = np.asarray([best.get(d, {}).get(PHRASES, 0.0) for d in docnos], dtype=np.float64)
                raw[detail(Stage.WINDOWS, PHRASES)] = pairs
                final = (1 - self.phrases) * minmax(final) + self.phrases * minmax(pairs)
            if self.aspects > 0 and any(ASPECTS in best.get(d, {}) for d in docnos):   # two sentences or more
                parts = np.asarray([best.get(d, {}).get(ASPECTS, 0.0) for d in docnos], dtype=np.float64)
                raw[detail(Stage.WINDOWS, ASPECTS)] = parts
                final = (1 - self.aspects) * minmax(final) + self.aspects * minmax(parts)
            out = []
            columns = [(k, v.tolist()) for k, v in raw.items()]        # floats: no numpy scalar a row
            for i, ((d, _, st), value) in enumerate(zip(head, final.tolist())):
                st = dict(st, **{k: v[i] for k, v in columns if v[i] == v[i]})     # NaN: not shown
                st[self.name] = value
                out.append((d, value, st))
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
