"""Each hit's best passages (character offsets into its text, ldr/search/passages.py): the last
stage, over the top `k` rows only. It gives no score."""
from __future__ import annotations

from dataclasses import dataclass

from ...stages import Stage
from .base import Candidates, QuerySource


@dataclass(frozen=True)
class Passages:
    n: int
    k: int
    side = "coordinator"
    name = Stage.PASSAGES.value

    def needs(self) -> int:
        return self.k

    def describe(self) -> str:
        return f"the {self.n} best passage{'s' if self.n != 1 else ''} of each of the top {self.k}"

    def run(self, cands: Candidates, source: QuerySource) -> Candidates:
        with cands.timed(self.name):
            cands.passages = source.passages([d for d, _, _ in cands.rows[:self.k]], self.n)
        return cands
