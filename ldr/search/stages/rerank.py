"""The second stage: a reranker (cross-encoder, the passage rescorer, a kind's exact scores) over
the top `depth` rows, its score mixed with the score before (`mix`); rows past the depth keep
their order below every reranked one. Its score is `scores["reranked"]`, the reranker's own
`scores["reranked.raw"]`, its features `scores["reranked.<feature>"]`."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, runtime_checkable

import numpy as np

from ...stages import Stage, detail
from ..normalise import zscore
from .base import Candidates, QuerySource

RAW = detail(Stage.RERANKED, "raw")


# -- what a second stage takes and gives (implementations: ldr/rerank/): a query and its
# candidates in, one score per candidate (and named features) out; the stage reads what the
# reranker says it needs (texts, passages) and never hands it the plan or the index
@dataclass
class Query:
    text: str
    rep: Callable[[str], Any]        # the query's representation for a retriever kind (encoded once)
    windows: int | None = None       # the search's `rerank_windows` (None: the reranker's own setting)


@dataclass
class Candidate:
    docno: int
    first_stage: dict[str, float] = field(default_factory=dict)   # each retriever's score (absent: not returned)
    text: str | None = None          # the document's text, when the reranker reads texts
    passages: list[str] = field(default_factory=list)   # its best passages, in document order


@runtime_checkable
class Reranker(Protocol):
    name: str
    reads_text: bool                 # the stage reads each candidate's text for it

    def passages_wanted(self, override: int | None) -> int:
        """Best passages per candidate it scores (0: none); `override`: the search's setting."""
        ...

    def rescore(self, query: Query, candidates: list[Candidate]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """(one score per candidate, {feature: one value per candidate})."""
        ...


def mix(second, first, weight: float) -> np.ndarray:
    """The reranked candidates' final scores: the second stage's own (weight 1), or
    weight·z(second) + (1 - weight)·z(first), both z-normalised over the candidates, so that a
    reranker that knows the domain less well than the first stage refines its order instead of
    replacing it (`ldr tune` chooses the weight)."""
    second = np.asarray(second, dtype=np.float64)
    if weight >= 1:
        return second
    return weight * zscore(second) + (1 - weight) * zscore(np.asarray(first, dtype=np.float64))


def order(rows: list, tiebreak) -> list:
    return sorted(rows, key=lambda r: (-r[1], r[0] if tiebreak is None else tiebreak[r[0]]))


@dataclass(frozen=True)
class RerankerSpec:
    """The second stage a plan names, as a value (nothing loaded: a plan compiles, prints and
    pickles without a model); the searcher binds it to a reranker where the plan runs
    (`QuerySource.reranker(spec)`): a cross-encoder (`model`), the passage rescorer, or a kind's
    exact scores."""
    name: str                        # "cross-encoder:MODEL" | "passage" | a kind
    model: str | None = None
    weights: tuple = ()              # (kind, fusion weight) of the searched kinds
    windows: int = 0                 # passages per document a cross-encoder scores by default
    reads_text: bool = False

    def passages_wanted(self, override: int | None) -> int:
        return (override or self.windows) if self.model else 0


@dataclass(frozen=True)
class Rerank:
    reranker: object = field(compare=False)     # a RerankerSpec (or a Reranker, bound already)
    depth: int = 100
    weight: float = 0.15
    windows: int | None = None          # passages per document a cross-encoder scores (None: its own)
    side = "coordinator"
    name = Stage.RERANKED.value

    def needs(self) -> int:
        return self.depth

    def describe(self) -> str:
        mixed = "its score alone" if self.weight >= 1 else f"mixed at {self.weight:g} with the score before"
        n = self.reranker.passages_wanted(self.windows)
        return f"{self.reranker.name} over the top {self.depth}" + (f" ({n} passages each)" if n else "") + f", {mixed}"

    def bound(self, source: QuerySource):
        r = self.reranker
        return source.reranker(r) if isinstance(r, RerankerSpec) else r

    def candidates(self, cands: Candidates, source: QuerySource, docnos: list[int], reranker=None) -> list[Candidate]:
        """The reranker's inputs: what it says it reads, read together."""
        reranker = reranker or self.bound(source)
        out = [Candidate(d, cands.first_stage(d)) for d in docnos]
        n = reranker.passages_wanted(self.windows)
        if n:
            found = source.passages(docnos, n)
            for c in out:
                c.passages = [p.text for p in sorted(found.get(c.docno, []), key=lambda p: p.start)]
        if reranker.reads_text:
            # a whole text only where no passage came (a cross-encoder then scores its own windows
            # of it): a shard sends the passages, not 100 long documents
            bare = [c for c in out if not c.passages]
            source.prefetch([c.docno for c in bare])
            for c in bare:
                c.text = source.text(c.docno)
        return out

    def rescore(self, cands: Candidates, source: QuerySource) -> tuple[list, list, np.ndarray, dict]:
        """(head rows, tail rows, the reranker's scores of the head, its features)."""
        head, tail = cands.rows[:self.depth], cands.rows[self.depth:]
        query = Query(source.query, source.rep, self.windows)
        reranker = self.bound(source)
        scores, feats = reranker.rescore(query, self.candidates(cands, source, [d for d, _, _ in head], reranker))
        return head, tail, np.asarray(scores, dtype=np.float64), feats

    def run(self, cands: Candidates, source: QuerySource) -> Candidates:
        if not cands.rows:
            return cands
        with cands.timed(self.name):
            head, tail, scores, feats = self.rescore(cands, source)
            cands.rescored = (head, tail, scores, feats)    # `ldr tune` re-mixes these at other weights
            cands.rows = self.combine(cands, head, tail, scores, feats, source.tiebreak())
        return cands

    def combine(self, cands: Candidates, head, tail, scores, feats, tiebreak) -> list:
        """The ranking after this stage from the reranker's scores (tune re-mixes at other weights)."""
        final = mix(scores, [sc for _, sc, _ in head], self.weight)
        reranked = []
        for i, (d, _, st) in enumerate(head):
            st = dict(st, **{RAW: float(scores[i]), self.name: float(final[i])})
            for f, vals in feats.items():
                st[detail(Stage.RERANKED, f)] = float(vals[i])
            cands.features[d] = {f: float(vals[i]) for f, vals in feats.items()}
            reranked.append((d, float(final[i]), st))
        reranked = order(reranked, tiebreak)
        cands.runs[self.name] = {d: s for d, s, _ in reranked}
        return reranked + tail
