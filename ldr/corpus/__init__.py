"""Corpus ingestion: a directory or file of text, Markdown, HTML, PDF, DOCX, ODT, EPUB, JSONL, JSON or
Parquet → streamed Docs."""
from __future__ import annotations

import logging
import os
import stat
from dataclasses import replace
from pathlib import Path
from typing import Callable, Iterable, Iterator

from ..errors import CorpusError
from .doc import Doc
from .formats import DOC_EXTS
from .readers import DEFAULT_MAX_DOC_MB, HTML_EXTS, JSON_EXTS, PARQUET_EXTS, SUPPORTED, Limits, read_one
from .worker import DEFAULT_DOC_TIMEOUT, ParseWorker
from .report import IngestReport
from .text import has_surrogates, replace_surrogates, utf8_len

log = logging.getLogger(__name__)

__all__ = ["Doc", "IngestReport", "iter_corpus", "check_documents", "list_files", "SUPPORTED"]


BOUNDED = DOC_EXTS | HTML_EXTS        # parsed in the bounded worker (worker.py)


def _is_index_dir(path: Path) -> bool:
    """An ldr index (a manifest says so): never ingested as corpus."""
    try:
        names = sorted(p for p in path.glob("manifest*.json") if p.name == "manifest.json" or p.name[9:-5].isdigit())
        return any(m.is_file() and m.stat().st_size < (64 << 20) and '"ldr-index"' in m.read_text("utf-8", "replace")
                   for m in names[-1:])
    except OSError:
        return False


def list_files(root: Path, report: IngestReport, exclude: Iterable[Path] = ()) -> list[Path]:
    """Regular files under root in a stable order; everything else is a counted skip.

    Hidden directories (.git, and ldr's own temporary build folders), ldr index directories and
    `exclude` (the output directory of the running build) are not read. FIFOs, sockets and devices
    (or links to them) are never opened: reading one would hang or never end.
    """
    excluded = {p.resolve() for p in exclude}
    if root.is_file() or (root.exists() and not root.is_dir()):
        return [root] if _regular(root, root.name, report) else []
    if not root.is_dir():
        raise CorpusError(f"corpus path {str(root)!r} does not exist (give a directory or a file)")
    files = []
    for dirpath, dirnames, filenames in os.walk(root, onerror=lambda e: report.skip("unreadable", str(e.filename))):
        keep = []
        for d in sorted(dirnames):
            p = Path(dirpath, d)
            rel = p.relative_to(root).as_posix()
            if ".ldr-tmp-" in d or ".ldr-old-" in d:
                log.info("not reading %s: ldr's temporary copy of an index", rel)
            elif p.resolve() in excluded:     # counted as any other index inside the corpus
                report.skip("ldr index directory", rel + "/ (the index being written)")
            elif d.startswith("."):
                report.skip("hidden directory", rel + "/")
            elif _is_index_dir(p):
                report.skip("ldr index directory", rel + "/")
            else:
                keep.append(d)
        dirnames[:] = keep
        for name in sorted(filenames):
            p = Path(dirpath, name)
            rel = p.relative_to(root).as_posix()
            if name.startswith("."):
                report.skip("hidden file", rel)
            elif p.suffix.lower() not in SUPPORTED:
                report.skip(f"unsupported file type {p.suffix.lower() or '(none)'}", rel)
            elif _regular(p, rel, report):
                files.append(p)
    return files


def _regular(p: Path, rel: str, report: IngestReport) -> bool:
    try:
        st = p.stat()  # follows links: a link to /dev/zero is a device
    except OSError as e:
        report.skip("unreadable", f"{rel} ({e.strerror or e})")
        return False
    if not stat.S_ISREG(st.st_mode):
        report.skip("not a regular file", rel)
        return False
    return True


def iter_corpus(path: str | os.PathLike, report: IngestReport | None = None, *,
                max_doc_mb: float = DEFAULT_MAX_DOC_MB, exclude: Iterable[str | os.PathLike] = (),
                doc_timeout: float = DEFAULT_DOC_TIMEOUT, known: Callable[[str, str], bool] | None = None
                ) -> Iterator[Doc]:
    """Stream the documents of a corpus directory or file (never all in memory).

    Documents over `max_doc_mb` are skipped and counted; PDF, DOCX, ODT, EPUB and HTML files are
    parsed in a worker process under a memory cap and a `doc_timeout` deadline (worker.py), and any
    failure is a counted skip. `exclude` lists directories not to read (the output directory when
    it lies inside the corpus). A file part of which was skipped is named in `report.partial`.
    A file of one document carries its "size:digest" (`Doc.stamp`); `known(rel, stamp)` true
    (`ldr add`: the index holds it so) counts the file unchanged without reading it.
    """
    root = Path(path)
    for e in exclude:
        refuse_inside(root, e)
    report = report if report is not None else IngestReport()
    limits = Limits(max_doc_mb)
    files = list_files(root, report, [Path(e) for e in exclude])
    base = root if root.is_dir() else root.parent
    folder = str(base.resolve())
    worker = None
    try:
        for f in files:
            rel = f.relative_to(base).as_posix()
            before = report.n_skipped
            stamp = _stamp(f, limits.max_doc_bytes)
            if stamp is not None and known is not None and known(rel, stamp):
                report.unchanged += 1
                continue
            if f.suffix.lower() in BOUNDED:
                worker = worker or ParseWorker(max_doc_mb, doc_timeout)
                docs: Iterable[Doc] = worker.read(f, rel, report)
            else:
                docs = _read_in_process(f, rel, report, limits)
            for doc in docs:
                yield replace(doc, root=folder, stamp=stamp)
            if report.n_skipped > before:
                report.partial.add(rel)
    finally:
        if worker is not None:
            worker.close()


def _stamp(f: Path, limit: int) -> str | None:
    """"size:digest" of the bytes of a file that holds one document (JSONL and Parquet hold many:
    None): its content, not its time, so a `touch` or a copy is still known unchanged. Reading and
    hashing a file costs a fraction of parsing it (a 118-page PDF: milliseconds against 9 s). A
    file over `limit` bytes is skipped as too large unread: it is not hashed either."""
    import hashlib

    if f.suffix.lower() in JSON_EXTS | PARQUET_EXTS:
        return None
    try:
        if f.stat().st_size > limit:
            return None
        with open(f, "rb") as fh:
            digest = hashlib.file_digest(fh, lambda: hashlib.blake2b(digest_size=16))
            return f"{fh.tell()}:{digest.hexdigest()}"
    except OSError:
        return None


def _read_in_process(f: Path, rel: str, report: IngestReport, limits: Limits) -> Iterator[Doc]:
    """Text, JSONL, Parquet: streamed and bounded as they are read; an unexpected error on one
    file is a counted skip (the documents it yielded before stay)."""
    try:
        yield from read_one(f, rel, report, limits)
    except (MemoryError, RecursionError, ValueError, OSError, UnicodeError, LookupError) as e:
        report.skip("unreadable file", f"{rel} ({type(e).__name__}: {str(e)[:160]})")


def _clean(doc: Doc, report: IngestReport) -> Doc:
    """Replace lone surrogates (JSON "\\ud800" escapes, API strings): they cannot be stored."""
    fields = {"id": doc.id, "text": doc.text, "title": doc.title}
    bad = [k for k, v in fields.items() if isinstance(v, str) and has_surrogates(v)]
    meta_bad = [k for k, v in (doc.meta or {}).items() if isinstance(v, str) and has_surrogates(v)]
    if not bad and not meta_bad:
        return doc
    where = doc.source or doc.id
    report.warn("lone surrogates replaced", str(replace_surrogates(str(where))))
    fields = {k: replace_surrogates(v) if k in bad else v for k, v in fields.items()}
    meta = {k: replace_surrogates(v) if k in meta_bad else v for k, v in (doc.meta or {}).items()}
    return replace(doc, **fields, meta=meta)


def _json_value(v) -> bool:
    """A metadata value ldr stores: what JSON holds (strings, booleans, whole and finite numbers,
    null, lists and objects of those). NaN, Infinity and other Python objects are not JSON."""
    import math

    if v is None or isinstance(v, (str, bool, int)):
        return True
    if isinstance(v, float):
        return math.isfinite(v)
    if isinstance(v, (list, tuple)):
        return all(_json_value(x) for x in v)
    if isinstance(v, dict):
        return all(isinstance(k, str) and _json_value(x) for k, x in v.items())
    return False


def _clean_meta(doc: Doc, report: IngestReport) -> Doc:
    """The same metadata rule on every path (files, the API, the server): JSON values are kept,
    nested, list and null ones included; anything else is dropped and reported."""
    meta = doc.meta or {}
    bad = [k for k, v in meta.items() if not isinstance(k, str) or not _json_value(v)]
    if not bad:
        return doc
    where = doc.source or doc.id
    for k in bad:
        report.warn("metadata values dropped (not JSON: NaN, Infinity or an object)", f"{where}: {k}")
    return replace(doc, meta={k: v for k, v in meta.items() if k not in bad})


class CheckedDocs:
    """What check_documents yields: checking it again passes it through (a writer checks before it
    drops unchanged documents, its segment writer checks whatever it is given)."""

    def __init__(self, it: Iterator[Doc]):
        self._it = it

    def __iter__(self):
        return self._it


def check_documents(docs: Iterable[Doc], report: IngestReport, max_doc_mb: float = DEFAULT_MAX_DOC_MB,
                    unchanged: Callable[[Doc], bool] | None = None) -> Iterable[Doc]:
    """Enforce corpus-wide rules while streaming: unique non-empty ids, at least one document.
    `unchanged(doc)` true: the index holds this document as it is (counted, not yielded).

    Counts `report.indexed`. Raises CorpusError naming the offending ids and where they came from.
    """
    if isinstance(docs, CheckedDocs):
        return docs if unchanged is None else CheckedDocs(_changed(docs, report, unchanged))
    return CheckedDocs(_checked(docs, report, max_doc_mb, unchanged))


def _changed(docs: Iterable[Doc], report: IngestReport, unchanged) -> Iterator[Doc]:
    for doc in docs:
        if unchanged(doc):
            report.unchanged += 1
        else:
            yield doc


def oversized(text: str, max_doc_mb: float) -> bool:
    """Over --max-doc-mb in UTF-8 (such a document is skipped); the character count first, since
    no character takes more than 4 bytes."""
    limit = int(max_doc_mb * (1 << 20))
    return len(text) * 4 > limit and utf8_len(text) > limit


def _checked(docs, report, max_doc_mb, unchanged) -> Iterator[Doc]:
    seen: dict[str, str] = {}
    for doc in docs:
        if not isinstance(doc, Doc):
            raise CorpusError(f"expected ldr.Doc objects (or dicts with id/text), got {type(doc).__name__}")
        if not isinstance(doc.id, str) or not isinstance(doc.text, str) or not isinstance(doc.title, str):
            raise CorpusError(f"document {doc.id!r}: id, text and title must be strings")
        doc = _clean_meta(_clean(doc, report), report)
        if oversized(doc.text, max_doc_mb):
            report.skip(f"larger than --max-doc-mb {max_doc_mb:g}",
                        f"{doc.source or doc.id} ({utf8_len(doc.text) / (1 << 20):.1f} MB; raise --max-doc-mb)")
            continue
        where = doc.source or ""
        if not (doc.text.strip() or doc.title.strip()):   # as the file readers do: nothing to search
            report.skip("empty document", where or doc.id or "(no id)")
            continue
        if not doc.id:
            raise CorpusError(f"a document has an empty id{f' ({where})' if where else ''}")
        if doc.id in seen:
            raise CorpusError(
                f"duplicate document id {doc.id!r}: first from {seen[doc.id] or 'the input'}, again from "
                f"{where or 'the input'}; ids must be unique (fix or drop one of them)")
        seen[doc.id] = where
        if unchanged is not None and unchanged(doc):
            report.unchanged += 1
            continue
        report.indexed += 1
        yield doc
    if report.indexed == 0 and not report.unchanged:
        why = f" ({report.summary()})" if report.n_skipped else ""
        raise CorpusError(f"the corpus has no indexable documents{why}")


def corpus_docs(corpus, report: IngestReport, max_doc_mb: float, out,
                doc_timeout: float = DEFAULT_DOC_TIMEOUT, known=None) -> Iterable[Doc]:
    """The documents of a corpus path (an index `out` inside it is not read as corpus; a corpus
    inside the index `out` is refused at once) or of an iterable of Docs/dicts."""
    if isinstance(corpus, (str, os.PathLike)):
        refuse_inside(corpus, out)
        return iter_corpus(corpus, report, max_doc_mb=max_doc_mb, exclude=[out], doc_timeout=doc_timeout,
                           known=known)
    return as_docs(corpus)


def refuse_inside(corpus, index) -> None:
    """A corpus that is the index or lies inside it would be its own documents (every file an
    ldr file, every id replaced by itself): a clear error instead."""
    c, i = Path(corpus).resolve(), Path(index).resolve()
    if c == i or i in c.parents:
        raise CorpusError(f"the corpus {corpus} is inside the index {index}: ldr does not read an index as "
                          "documents; give the folder or file of your documents")


def as_docs(items: Iterable) -> Iterable[Doc]:
    for i, item in enumerate(items):
        if isinstance(item, Doc):
            yield item
        elif isinstance(item, dict):
            doc_id = item.get("id", item.get("_id"))
            if doc_id is None or "text" not in item:
                raise CorpusError(f"document #{i} needs 'id' (or '_id') and 'text' keys; got {sorted(item)}")
            meta = {k: v for k, v in item.items() if k not in ("id", "_id", "text", "title")}
            yield Doc(str(doc_id), item["text"], item.get("title") or "", meta)
        else:
            raise CorpusError(f"document #{i} is a {type(item).__name__}; give ldr.Doc objects or dicts")
