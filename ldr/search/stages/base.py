"""The one interface of a plan's stages, the value that flows between them, and the registry
through which a new stage type (say, a metadata boost defined in a user's module) plugs into
the plan, and so into `ldr search`, the server, `ldr eval` and `ldr tune`, without an edit here.

A stage is a small frozen value: its settings, `side` (where it can run: "shard" for a first
stage, "coordinator" for what ranks gathered candidates), `describe()` for `--explain`, and
`run(candidates, source) -> candidates`. `source` is the query's read access to one pinned
generation (texts, query representations, passages); a stage never reaches further.
"""
from __future__ import annotations

import dataclasses
import math
import time
import typing
from collections.abc import Mapping, Sequence
from itertools import islice
from operator import gt, itemgetter
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from ...errors import ConfigError, QueryError

Row = tuple   # (docno, score, {stage or kind: score})


def strictly_falling(rows: list, n: int) -> bool:
    """The first `n` of (docno, score, ...) rows in falling score order hold no two equal scores
    (no tie for an id order to break)."""
    scores = list(map(itemgetter(1), islice(rows, n)))
    return all(map(gt, scores, islice(scores, 1, None)))


class RankedRows(Sequence):
    """The rows of one kind's own ranking, read-only: (docno, score, {kind: score}), each made
    when read. A run of lone rankings (search/batch.py) builds its hits from `pairs` and never
    reads the rows; a tuple and a dict a row were a tenth of a top-1,000 BM25 run."""

    __slots__ = ("kind", "pairs")

    def __init__(self, kind: str, pairs: list):
        self.kind, self.pairs = kind, pairs       # pairs: [(docno, score)], best first

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return RankedRows(self.kind, self.pairs[i])
        d, sc = self.pairs[i]
        return d, sc, {self.kind: sc}

    def __iter__(self):
        kind = self.kind
        return ((d, sc, {kind: sc}) for d, sc in self.pairs)

    def __eq__(self, other) -> bool:
        return list(self) == list(other) if isinstance(other, Sequence) else NotImplemented

    def __repr__(self) -> str:
        return repr(list(self))


class ListedScores(Mapping):
    """{docno: score} of a ranked list of (docno, score), read-only, its dict built on first use:
    a lone ranking (each query of a BM25 run) never reads it, and the dict of a run's 162 hits a
    query was ~3 us of its ~250."""

    __slots__ = ("_rows", "_dict")

    def __init__(self, rows: list):
        self._rows, self._dict = rows, None

    def _scores(self) -> dict:
        if self._dict is None:
            self._dict = dict(self._rows)
        return self._dict

    def __getitem__(self, docno):
        return self._scores()[docno]

    def __iter__(self):
        return iter(self._scores())

    def __len__(self) -> int:
        return len(self._scores())

    def __contains__(self, docno) -> bool:
        return docno in self._scores()

    def __eq__(self, other) -> bool:
        return self._scores() == (other._scores() if isinstance(other, ListedScores) else other)

    def __repr__(self) -> str:
        return repr(self._scores())

    def keys(self):
        return self._scores().keys()

    def values(self):
        return self._scores().values()

    def items(self):
        return self._scores().items()

    def get(self, docno, default=None):
        return self._scores().get(docno, default)


@dataclass
class Candidates:
    """The candidates of one query so far. `lists`: each first stage's ranked (docno, score);
    `rows`: the current ranking with every stage's score of each row; `runs`: every score a
    ranking stage gave ({stage: {docno: score}}, what `ldr eval` writes); `features`: a
    reranker's named features per docno; `timings`: seconds per stage; `distributions`: a first
    stage's scores of the query over every document of the index, as sums (n, sum, sumsq, max);
    `bounds`: the highest score a first stage can give the query (BM25: every term saturated)."""

    query: str
    lists: dict[str, list] = field(default_factory=dict)
    rows: list[Row] = field(default_factory=list)
    runs: dict[str, dict] = field(default_factory=dict)
    features: dict[int, dict] = field(default_factory=dict)
    passages: dict[int, list] = field(default_factory=dict)   # docno → its best Passages (the hits')
    rescored: tuple | None = None   # the second stage's (head rows, tail rows, scores, features)
    timings: dict[str, float] = field(default_factory=dict)
    distributions: dict[str, dict] = field(default_factory=dict)   # kind → its scores over the index (sums)
    bounds: dict[str, float] = field(default_factory=dict)   # kind → the highest score the query can reach

    @contextmanager
    def timed(self, name: str):
        t = time.perf_counter()
        yield
        self.timings[str(name)] = self.timings.get(str(name), 0.0) + time.perf_counter() - t

    def first_stage(self, docno: int) -> dict[str, float]:
        """Each first stage's score of `docno` (absent where it did not return it)."""
        return {n: self.runs[n][docno] for n in self.lists if docno in self.runs.get(n, {})}


class QuerySource(Protocol):
    """What a stage may read for one query, from one pinned generation."""

    query: str

    def rep(self, kind: str) -> Any: ...                  # the query encoded for a kind (once)
    def search(self, kind: str, rep: Any, depth: int) -> list: ...   # a kind's top (docno, score), filtered
    def best_windows(self, docnos: list[int], scales=(), phrases: bool = False, aspects: bool = False) -> dict: ...   # {docno: {kind or scale: its best window's score}}
    def covers(self, docnos: list[int]) -> dict: ...      # {docno: the share of the query's terms two neighbouring windows hold}
    def text(self, docno: int) -> str: ...
    def prefetch(self, docnos) -> None: ...               # read these texts together
    def passages(self, docnos: list[int], n: int) -> dict: ...   # {docno: its n best Passages}
    def tiebreak(self) -> Any: ...                        # docno → the rank of its id (equal scores)
    def score_bound(self, kind: str, rep: Any) -> float | None: ...  # the highest score a kind can give `rep` (shards)
    def meta(self, docnos: list[int]) -> dict: ...        # {docno: its metadata dict}
    def reranker(self, spec: Any) -> Any: ...             # a plan's RerankerSpec bound where it runs


class PlanStage(Protocol):
    name: str
    side: str          # "shard" | "coordinator"

    def needs(self) -> int: ...                           # candidates it reads from the ranking before it
    def describe(self) -> str: ...
    def run(self, cands: Candidates, source: QuerySource) -> Candidates: ...


@dataclass(frozen=True)
class StageType:
    """A stage type the plan can hold besides the built-in ones: `settings` is its dataclass
    (the fields a request sets, as `stages={name: {field: value}}` or `--stage name:field=value`),
    `make(settings) -> PlanStage` builds it; it runs after `after` (a Stage value)."""

    name: str
    settings: type
    make: Callable[[Any], PlanStage]
    after: str = "windows"
    help: str = ""

    def build(self, values: dict | None) -> PlanStage:
        values = dict(values or {})
        known = {f.name: f for f in dataclasses.fields(self.settings)}
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise QueryError(f"stage {self.name!r} has no setting {', '.join(unknown)}; it has: "
                             f"{', '.join(known) or 'none'}")
        hints = typing.get_type_hints(self.settings)
        for k, v in list(values.items()):
            want = hints.get(k)
            if want in (int, float) and isinstance(v, str):
                try:
                    values[k] = want(v)
                except ValueError:
                    raise QueryError(f"stage {self.name!r}: {k} must be a number (got {v!r})") from None
        for k, v in values.items():     # as every other option: a NaN or infinite number is refused
            if isinstance(v, float) and not math.isfinite(v):
                raise QueryError(f"stage {self.name!r}: {k} must be a finite number (got {v!r})")
        try:
            return self.make(self.settings(**values))
        except (TypeError, ValueError) as e:
            raise QueryError(f"stage {self.name!r}: {e}") from None


_STAGES: dict[str, StageType] = {}


def register_stage(stage: StageType) -> StageType:
    from ...stages import RESERVED

    if not stage.name.isidentifier() or stage.name in RESERVED:
        raise ConfigError(f"a stage needs a plain name that is not a built-in stage's, not {stage.name!r}")
    _STAGES[stage.name] = stage
    return stage


def unregister_stage(name: str) -> None:
    _STAGES.pop(name, None)


def registered() -> dict[str, StageType]:
    return dict(_STAGES)


def stage_type(name: str) -> StageType:
    try:
        return _STAGES[name]
    except KeyError:
        raise QueryError(f"unknown stage {name!r}; registered stages: {', '.join(_STAGES) or 'none'}") from None
