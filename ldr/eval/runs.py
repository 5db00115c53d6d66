"""TREC run files: `qid Q0 docid rank score tag`, best first."""
from __future__ import annotations

from pathlib import Path


def write_run(path: Path, run: dict[str, dict[str, float]], tag: str) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        for qid in sorted(run):
            ranked = sorted(run[qid].items(), key=lambda kv: (-kv[1], kv[0]))
            for rank, (doc, score) in enumerate(ranked, 1):
                fh.write(f"{qid} Q0 {doc} {rank} {score:.6f} {tag}\n")


def read_run(path: Path) -> dict[str, dict[str, float]]:
    run: dict[str, dict[str, float]] = {}
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            parts = line.split()
            if len(parts) >= 6:
                run.setdefault(parts[0], {})[parts[2]] = float(parts[4])
    return run
