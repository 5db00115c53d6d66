"""The query pipeline: run the selected first-stage retrievers and turn their output into Hits."""
from __future__ import annotations

from typing import Callable

from ..errors import ConfigError
from .hits import Hit

# A retriever maps (query, depth) → [(docno, score)], best first.
Retriever = Callable[[str, int], list[tuple[int, float]]]


def run_retriever(name: str, retrievers: dict[str, Retriever], query: str, depth: int) -> list[tuple[int, float]]:
    if name not in retrievers:
        have = ", ".join(sorted(retrievers)) or "none"
        raise ConfigError(f"this index has no {name!r} component (it has: {have}); rebuild with it or pick another --mode")
    return retrievers[name](query, depth)


def to_hits(ranked: list[tuple[int, float]], stage: str, ids: list[str], titles: list[str]) -> list[Hit]:
    return [Hit(id=ids[d], score=s, rank=r, title=titles[d], docno=d, scores={stage: s})
            for r, (d, s) in enumerate(ranked, 1)]
