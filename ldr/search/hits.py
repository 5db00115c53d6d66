from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Hit:
    """One search result: the document and why it ranked (score of each stage)."""

    id: str
    score: float
    rank: int
    title: str = ""
    text: str | None = None
    docno: int = -1                     # row in the docstore
    scores: dict[str, float] = field(default_factory=dict)

    def to_dict(self, with_text: bool = False) -> dict:
        d = {"id": self.id, "score": self.score, "rank": self.rank, "title": self.title, "scores": self.scores}
        if with_text and self.text is not None:
            d["text"] = self.text
        return d

    def snippet(self, width: int = 120) -> str:
        text = " ".join((self.text or "").split())
        return text if len(text) <= width else text[: width - 1] + "…"
