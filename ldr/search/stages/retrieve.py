"""The first stage: one retriever kind's top `depth` over the documents the filters allow. It runs
where the index's files are (on a shard of a sharded index)."""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

from ...errors import IndexFormatError, LdrError
from .base import Candidates, QuerySource


@dataclass(frozen=True)
class Retrieve:
    kind: str
    depth: int
    filtered: bool = False
    distribution: bool = False      # also the query's score distribution over the whole generation (relevance)
    bound: bool = False             # also the highest score the query can reach, with the statistics it scored with
    side = "shard"

    @property
    def name(self) -> str:
        return self.kind

    def needs(self) -> int:
        return 0

    def describe(self) -> str:
        return f"top {self.depth}" + (", filtered" if self.filtered else "")

    def run(self, cands: Candidates, source: QuerySource) -> Candidates:
        with cands.timed(self.kind):
            rep = source.rep(self.kind)
            with damage_guard(self.kind):
                found = source.search(self.kind, rep, self.depth)
            if self.distribution and (got := source.distribution(self.kind, rep)) is not None:
                cands.distributions[self.kind] = got
            if self.bound and (got := source.score_bound(self.kind, rep)) is not None:
                cands.bounds[self.kind] = got
        cands.lists[self.kind] = found
        cands.runs[self.kind] = dict(found)
        return cands


@contextmanager
def damage_guard(name: str):
    """What a component's reader raises while searching a damaged file (a Rust panic from tantivy,
    a BaseException; ValueError/OverflowError from a decoder) becomes one clear IndexFormatError
    naming `ldr check`, for the CLI and the server alike; ldr's own errors pass unchanged."""
    try:
        yield
    except (LdrError, KeyboardInterrupt, SystemExit, GeneratorExit, MemoryError):
        raise
    except BaseException as e:
        if not isinstance(e, Exception) and type(e).__name__ != "PanicException":
            raise
        first = str(e).splitlines()[0][:200] if str(e) else ""
        raise IndexFormatError(
            f"the {name} component failed while searching ({type(e).__name__}: {first}); its files are probably "
            "damaged: run `ldr check INDEX`, then restore the index or rebuild it with `ldr index`") from None
