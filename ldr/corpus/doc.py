from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Doc:
    """One document as it enters the index."""

    id: str
    text: str
    title: str = ""
    meta: dict = field(default_factory=dict)
