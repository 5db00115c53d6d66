"""Bookkeeping for ingestion: every input either becomes a document or a counted skip."""
from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

# Keep at most this many example messages per reason; counts are always exact.
_MAX_EXAMPLES = 5


@dataclass
class IngestReport:
    indexed: int = 0
    unchanged: int = 0      # `ldr add`: already in the index as they are (neither indexed nor skipped)
    skipped: Counter = field(default_factory=Counter)
    # Not skips: documents kept, but with something worth telling (e.g. bytes replaced).
    warnings: Counter = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)
    # files part of whose content was skipped: `ldr add --prune` keeps their documents
    partial: set = field(default_factory=set)

    def skip(self, reason: str, where: str, n: int = 1) -> None:
        """Count `n` documents lost for `reason` (n > 1: e.g. the rows of a corrupt row group)."""
        self.skipped[reason] += n
        self._example(reason, where)
        log.info("skipped %s: %s", where, reason)     # the caller reports the counts (CLI: at the end)

    def warn(self, reason: str, where: str) -> None:
        self.warnings[reason] += 1
        self._example(reason, where)
        log.info("%s: %s", where, reason)

    def _example(self, reason: str, where: str) -> None:
        ex = self.examples.setdefault(reason, [])
        if len(ex) < _MAX_EXAMPLES:
            ex.append(where)

    @property
    def n_skipped(self) -> int:
        return sum(self.skipped.values())

    def summary(self) -> str:
        """`N documents indexed, M skipped (reason: n, ...)` plus warnings."""
        s = f"{self.indexed} documents indexed, " + (f"{self.unchanged} unchanged, " if self.unchanged else "") \
            + f"{self.n_skipped} skipped"
        if self.skipped:
            s += " (" + ", ".join(f"{r}: {n}" for r, n in sorted(self.skipped.items())) + ")"
        if self.warnings:
            s += "; " + ", ".join(f"{r}: {n}" for r, n in sorted(self.warnings.items()))
        return s

    def details(self) -> list[str]:
        """One line per reason with example locations, for verbose output."""
        lines = []
        for reason in sorted(self.examples):
            n = self.skipped.get(reason) or self.warnings.get(reason)
            lines.append(f"  {reason} ({n}): " + ", ".join(self.examples[reason]))
        return lines

    def to_dict(self) -> dict:
        return {"indexed": self.indexed, "unchanged": self.unchanged, "skipped": dict(self.skipped), "warnings": dict(self.warnings)}
