"""A retrieval task as the evaluator sees it, and readers for rows in official file formats."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator

from ..corpus import Doc
from ..errors import DataError


@dataclass
class Task:
    """One retrieval task: a corpus, queries and relevance judgements (qrels)."""

    name: str
    corpus: Callable[[], Iterable[Doc]]          # re-iterable: called once per index build
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    group: str | None = None                     # e.g. "passkey" for "passkey@1024"
    length: int | None = None                    # context length of a passkey/needle split
    fingerprint: str = ""                        # identifies the data, for the index cache
    meta: dict = field(default_factory=dict)


def _kind(path: Path) -> tuple[str, str]:
    """(stem, format) of a data file: `test.jsonl.gz` → ("test", ".jsonl")."""
    name = path.name[:-3] if path.name.endswith(".gz") else path.name
    p = Path(name)
    return p.stem, p.suffix


def read_rows(path: Path) -> Iterator[dict]:
    """Rows of a .jsonl / .json / .parquet file (.jsonl.gz and .json.gz too, as MLDR ships them),
    streamed where the format allows."""
    path = Path(path)
    if path.name.endswith(".gz"):
        import gzip
        with gzip.open(path, "rt", encoding="utf-8") as fh:
            if _kind(path)[1] == ".json":
                data = json.load(fh)
                yield from (data if isinstance(data, list) else [data])
            else:
                for line in fh:
                    if line.strip():
                        yield json.loads(line)
    elif path.suffix == ".parquet":
        import pyarrow.parquet as pq
        for batch in pq.ParquetFile(path).iter_batches(batch_size=512):
            yield from batch.to_pylist()
    elif path.suffix == ".json":
        data = json.loads(path.read_text(encoding="utf-8"))
        yield from (data if isinstance(data, list) else [data])
    else:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                if line.strip():
                    yield json.loads(line)


_EXTS = (".jsonl", ".json", ".parquet")


def find_files(root: Path, config: str, split: str) -> list[Path]:
    """Files of (config, split) in a dataset folder as downloaded from the Hugging Face hub.

    Accepts the layouts the hub uses: `config/split.jsonl`, `config/split-00000-of-00001.parquet`,
    `config/split/0000.parquet`, `config/data/split-*.parquet`, `data/config/...`, and the same under a `*config*` folder name
    (MLDR's raw repository: `mldr-v1.0-{lang}/{corpus,dev,test}.jsonl.gz`).
    """
    root = Path(root)
    bases = [root / config, root / config / "data", root / "data" / config, root]
    bases += sorted(p for p in root.glob(f"*{config}*") if p.is_dir())
    for base in bases:
        if not base.is_dir():
            continue
        hits = sorted(p for p in base.iterdir() if p.is_file() and _kind(p)[1] in _EXTS
                      and (_kind(p)[0] == split or _kind(p)[0].startswith((f"{split}-", f"{split}_"))))
        if not hits and (base / split).is_dir():
            hits = sorted(p for p in (base / split).iterdir() if _kind(p)[1] in _EXTS)
        if hits:
            return hits
    return []


def rows_of(root: Path, config: str, split: str, what: str) -> Iterator[dict]:
    files = find_files(root, config, split)
    if not files:
        raise DataError(f"{what}: no {config}/{split} file (.jsonl/.json/.parquet, or .jsonl.gz) under {root}")
    for f in files:
        yield from read_rows(f)


def fingerprint(*paths: Path, extra: str = "") -> str:
    """Cheap identity of input files (names, sizes, mtimes) for cache keys."""
    import hashlib
    h = hashlib.sha256(extra.encode())
    for p in paths:
        for f in sorted(Path(p).rglob("*")) if Path(p).is_dir() else [Path(p)]:
            if f.is_file():
                st = f.stat()
                h.update(f"{f}:{st.st_size}:{int(st.st_mtime)}".encode())
    return h.hexdigest()[:16]
