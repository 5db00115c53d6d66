from __future__ import annotations

from dataclasses import dataclass, field


def origin(doc) -> dict | None:
    """ldr's bookkeeping of a Doc as a hit shows it ({"source", "path"}), None if it has none."""
    return {k: v for k, v in (("source", doc.source), ("path", doc.path)) if v is not None} or None


@dataclass(slots=True)
class Hit:
    """One search result: the document and why it ranked (score of each stage). Slots: a run of
    a thousand hits a query builds them 2.4x faster."""

    id: str
    score: float
    rank: int
    title: str = ""
    text: str | None = None
    docno: int = -1                     # row in the docstore
    scores: dict[str, float] = field(default_factory=dict)
    passages: list = field(default_factory=list)   # best passages (ldr/search/passages.py), best first
    meta: dict | None = None            # metadata given at indexing (with passages or text)
    origin: dict | None = None          # ldr's own: {"source": "c.jsonl line 3", "path": "c.jsonl"}

    @property
    def relevance(self) -> float | None:
        """The calibrated estimate of P(relevant) (search/calibration.py): unlike `score`, which
        orders this list, it does not depend on the other candidates; None where none was fitted."""
        return self.scores.get("relevance")

    def to_dict(self, with_text: bool = False) -> dict:
        d = {"id": self.id, "score": self.score, "rank": self.rank, "title": self.title,
             "relevance": self.relevance, "scores": self.scores}
        if self.passages:
            d["passages"] = [p.to_dict() for p in self.passages]
        if self.meta is not None:
            d["meta"] = self.meta
        if self.origin:
            d["ldr"] = self.origin
        if with_text and self.text is not None:
            d["text"] = self.text
        return d

    def snippet(self, width: int = 120) -> str:
        text = " ".join((self.passages[0].text if self.passages else (self.text or "")).split())
        return text if len(text) <= width else text[: width - 1] + "…"


_SCORES, _PASSAGES = Hit.scores, Hit.passages     # the dataclass's own slots


class RankedHit(Hit):
    """A hit of one kind's own ranking as a run builds it (`ranked_hits`): its `scores`
    ({kind: score}) and `passages` ([]) made when first read, then held as a Hit holds them.
    Most runs read ids and scores only: a dict and a list a hit, made and freed, were 13% of a
    top-1,000 BM25 run on qmsum-train."""

    __slots__ = ("_kind", "_first")        # the ranking's kind, the hit's score in it

    @property
    def scores(self) -> dict:
        try:
            return _SCORES.__get__(self)
        except AttributeError:      # not read yet
            made = {self._kind: self._first}
            _SCORES.__set__(self, made)
            return made

    @scores.setter
    def scores(self, value: dict) -> None:
        _SCORES.__set__(self, value)

    @property
    def passages(self) -> list:
        try:
            return _PASSAGES.__get__(self)
        except AttributeError:
            made = []
            _PASSAGES.__set__(self, made)
            return made

    @passages.setter
    def passages(self, value: list) -> None:
        _PASSAGES.__set__(self, value)

    def __eq__(self, other):
        # equal to the Hit with the same fields (the dataclass's own __eq__ wants one class)
        if not isinstance(other, Hit):
            return NotImplemented
        return all(getattr(self, f) == getattr(other, f) for f in Hit.__dataclass_fields__)

    __hash__ = None


class SearchResult(list):
    """The hits of one search, best first (a plain list of Hit), with what produced them: each
    search returns its own, so one Index can serve many threads."""

    def __init__(self, hits, query: str = "", timings_ms: dict | None = None, reranker: str | None = None,
                 candidates=None, plan=None, took_ms: float | None = None):
        super().__init__(hits)
        self.query = query
        # milliseconds everywhere (API, --json, the server): per stage, and the whole search
        self.timings_ms = timings_ms or {}
        self.took_ms = took_ms
        self.reranker = reranker
        self.candidates = candidates  # every stage's scores of every candidate (search/stages/base.py)
        self.plan = plan              # what ran (search/plan.py): `.explain()`
        self.finder = None            # the passage finder that placed the passages (marks query terms)
        self.generation: int | None = None   # the index generation that answered
        self.missing_shards: list[int] = []  # a sharded index's shards that could not answer (no replica)
        self.ids: dict = {}                   # {docno: id} of every candidate (the runs are by docno)
        self.rounds = 0                       # calls made to the shards, each to every shard concerned at once


def finite(obj):
    """`obj` with every non-finite float (NaN, ±Infinity: not JSON) as None, for JSON answers that
    must always parse, whatever an older index or a metadata value holds."""
    import math

    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return obj


def to_hits(rows, ids, titles) -> list[Hit]:
    """Hits of ranked rows (`ids`, `titles`: {docno: ...} of at least these rows), each as
    Hit(ids[d], s, rank, titles[d], None, d, st) would make it: its slots set here, without the
    dataclass's __init__ (a BM25 run's 1,000 hits a query built in 0.63x the time)."""
    out, new = [], object.__new__
    add = out.append
    for r, (d, s, st) in enumerate(rows, 1):
        h = new(Hit)
        h.id = ids[d]
        h.score = s
        h.rank = r
        h.title = titles[d]
        h.text = None
        h.docno = d
        h.scores = st
        h.passages = []
        h.meta = None
        h.origin = None
        add(h)
    return out


def ranked_hits(kind: str, pairs, ids, titles) -> list[Hit]:
    """The hits of one kind's own ranking (`pairs`: (docno, score), best first; `ids`, `titles`:
    as to_hits reads them), each equal to the Hit to_hits makes of its row (d, s, {kind: s})."""
    out, new = [], object.__new__
    add = out.append
    for r, (d, s) in enumerate(pairs, 1):
        h = new(RankedHit)
        h.id = ids[d]
        h.score = h._first = s
        h.rank = r
        h.title = titles[d]
        h.text = None
        h.docno = d
        h._kind = kind
        h.meta = None
        h.origin = None
        add(h)
    return out
