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
    """A TREC run as {qid: {docid: score}}; a line that is not `qid Q0 docid rank score tag` is an
    error naming it (trec_eval semantics: ranks come from the scores, not the rank column)."""
    from ..errors import ConfigError

    run: dict[str, dict[str, float]] = {}
    try:
        with open(path, encoding="utf-8") as fh:
            for n, line in enumerate(fh, 1):
                parts = line.split()
                if not parts:
                    continue
                try:
                    if len(parts) < 6:
                        raise ValueError
                    run.setdefault(parts[0], {})[parts[2]] = float(parts[4])
                except ValueError:
                    raise ConfigError(f"{path} line {n}: not a TREC run line (qid Q0 docid rank score tag)") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read the run {path}: {e}") from None
    return run
