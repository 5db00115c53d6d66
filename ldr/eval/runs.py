"""TREC run files: `qid Q0 docid rank score tag`, best first.

TREC columns are separated by whitespace, so an id holding whitespace (a file named
`my notes.txt`) cannot be written as it is. ldr writes such ids escaped: every whitespace
character and `%` as `%XX` (its UTF-8 bytes in hex, as in URLs: `my%20notes.txt`, `100%25`), and
reads every run and TREC qrels file back the same way, so ids round-trip exactly. Ids without
whitespace or `%` are written unchanged. Other tools do not unescape: `ldr eval` writes the qrels
it scored with beside its runs, escaped the same way (`write_qrels`), and both `ldr eval` and
`ldr search --queries` say when an id was escaped."""
from __future__ import annotations

import math
import re

from pathlib import Path


def write_run(path: Path, run: dict[str, dict[str, float]], tag: str) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        for qid in sorted(run):
            ranked = sorted(run[qid].items(), key=lambda kv: (-kv[1], kv[0]))
            for rank, (doc, score) in enumerate(ranked, 1):
                fh.write(run_line(qid, doc, rank, score, tag))


def needs_escape(s: str) -> bool:
    return any(c.isspace() or c == "%" for c in s)


def write_qrels(path: Path, qrels: dict[str, dict[str, int]]) -> None:
    """TREC qrels (`qid 0 docid relevance`) with ids escaped as the runs write them: trec_eval,
    ir-measures or ranx given this file and ldr's runs score what `ldr eval` scores, whatever
    the ids hold (the original qrels name `my notes.txt` where a run can only say `my%20notes.txt`)."""
    with open(path, "w", encoding="utf-8") as fh:
        for qid in sorted(qrels):
            for doc, rel in sorted(qrels[qid].items()):
                fh.write(f"{escape_id(qid)} 0 {escape_id(doc)} {int(rel)}\n")


def escape_id(s: str) -> str:
    """An id as a TREC column: whitespace and `%` as `%XX`."""
    if not any(c.isspace() or c == "%" for c in s):
        return s
    return "".join("".join(f"%{b:02X}" for b in c.encode("utf-8")) if c.isspace() or c == "%" else c for c in s)


_ESCAPE = re.compile(r"(?:%[0-9A-Fa-f]{2})+")


def unescape_id(s: str) -> str:
    """escape_id undone (a `%` not followed by two hex digits is kept as it is)."""
    if "%" not in s:
        return s
    return _ESCAPE.sub(lambda m: bytes.fromhex(m.group(0).replace("%", "")).decode("utf-8", "replace"), s)


def run_line(qid: str, doc: str, rank: int, score: float, tag: str) -> str:
    return f"{escape_id(qid)} Q0 {escape_id(doc)} {rank} {score:.6f} {tag}\n"


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
                    score = float(parts[4])
                except ValueError:
                    raise ConfigError(f"{path} line {n}: not a TREC run line (qid Q0 docid rank score tag)") from None
                if not math.isfinite(score):
                    raise ConfigError(f"{path} line {n}: the score {parts[4]!r} is not a finite number")
                qid, doc = unescape_id(parts[0]), unescape_id(parts[2])
                docs = run.setdefault(qid, {})
                if doc in docs:
                    raise ConfigError(f"{path} line {n}: document {doc!r} is listed twice for query {qid!r}")
                docs[doc] = score
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read the run {path}: {e}") from None
    return run
