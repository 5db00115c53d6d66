"""Corpus ingestion: a directory or file of txt/md/html/jsonl/json/parquet → streamed Docs."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, Iterator

from ..errors import CorpusError
from .doc import Doc
from .readers import HTML_EXTS, JSON_EXTS, PARQUET_EXTS, SUPPORTED, TEXT_EXTS, read_html, read_jsonl, read_parquet, read_text
from .report import IngestReport

__all__ = ["Doc", "IngestReport", "iter_corpus", "check_documents", "list_files", "SUPPORTED"]


def list_files(root: Path, report: IngestReport) -> list[Path]:
    """Files under root in a stable order; unsupported files are counted as skips."""
    if root.is_file():
        return [root]
    if not root.is_dir():
        raise CorpusError(f"corpus path {str(root)!r} does not exist (give a directory or a file)")
    files = []
    for dirpath, dirnames, filenames in os.walk(root, onerror=lambda e: report.skip("unreadable", str(e.filename))):
        dirnames.sort()
        for name in sorted(filenames):
            p = Path(dirpath, name)
            rel = p.relative_to(root).as_posix()
            if name.startswith("."):
                report.skip("hidden file", rel)
            elif p.suffix.lower() not in SUPPORTED:
                report.skip(f"unsupported file type {p.suffix.lower() or '(none)'}", rel)
            else:
                files.append(p)
    return files


def _read_file(path: Path, rel: str, report: IngestReport) -> Iterator[Doc]:
    ext = path.suffix.lower()
    if ext in TEXT_EXTS:
        return read_text(path, rel, report)
    if ext in HTML_EXTS:
        return read_html(path, rel, report)
    if ext in JSON_EXTS:
        return read_jsonl(path, rel, report)
    if ext in PARQUET_EXTS:
        return read_parquet(path, rel, report)
    raise CorpusError(f"{rel}: unsupported file type {ext!r}; supported: {', '.join(sorted(SUPPORTED))}")


def iter_corpus(path: str | os.PathLike, report: IngestReport | None = None) -> Iterator[Doc]:
    """Stream the documents of a corpus directory or file (never all in memory)."""
    root = Path(path)
    report = report if report is not None else IngestReport()
    files = list_files(root, report)
    base = root if root.is_dir() else root.parent
    for f in files:
        yield from _read_file(f, f.relative_to(base).as_posix(), report)


def check_documents(docs: Iterable[Doc], report: IngestReport) -> Iterator[Doc]:
    """Enforce corpus-wide rules while streaming: unique non-empty ids, at least one document.

    Counts `report.indexed`. Raises CorpusError naming the offending ids and where they came from.
    """
    seen: dict[str, str] = {}
    for doc in docs:
        if not isinstance(doc, Doc):
            raise CorpusError(f"expected ldr.Doc objects (or dicts with id/text), got {type(doc).__name__}")
        where = doc.meta.get("source", "") if doc.meta else ""
        if not doc.id:
            raise CorpusError(f"a document has an empty id{f' ({where})' if where else ''}")
        if doc.id in seen:
            raise CorpusError(
                f"duplicate document id {doc.id!r}: first from {seen[doc.id] or 'the input'}, again from "
                f"{where or 'the input'}; ids must be unique (fix or drop one of them)")
        seen[doc.id] = where
        report.indexed += 1
        yield doc
    if report.indexed == 0:
        why = f" ({report.summary()})" if report.n_skipped else ""
        raise CorpusError(f"the corpus has no indexable documents{why}")
