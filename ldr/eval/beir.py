"""BEIR folders: corpus.jsonl (_id, title, text), queries.jsonl (_id, text), qrels/<split>.tsv."""
from __future__ import annotations

import csv
import json
from pathlib import Path

from ..errors import DataError


def load_queries(folder: Path) -> dict[str, str]:
    path = Path(folder) / "queries.jsonl"
    if not path.is_file():
        raise DataError(f"{path} not found: a BEIR folder holds corpus.jsonl, queries.jsonl and qrels/<split>.tsv")
    out = {}
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                rec = json.loads(line)
                out[str(rec["_id"])] = rec["text"]
    return out


def load_qrels(folder: Path, split: str = "test") -> dict[str, dict[str, int]]:
    path = Path(folder) / "qrels" / f"{split}.tsv"
    if not path.is_file():
        have = sorted(p.stem for p in (Path(folder) / "qrels").glob("*.tsv"))
        raise DataError(f"{path} not found (splits present: {', '.join(have) or 'none'})")
    qrels: dict[str, dict[str, int]] = {}
    with open(path, encoding="utf-8", newline="") as fh:
        rows = csv.reader(fh, delimiter="\t")
        for row in rows:
            if not row or row[0] == "query-id":
                continue
            qrels.setdefault(row[0], {})[row[1]] = int(row[2])
    return qrels
