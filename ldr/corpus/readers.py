"""One reader per input format. Each yields Docs and reports what it could not use.

Readers never raise for a bad file inside a corpus: they count it in the report, so that one
broken file does not stop a 100k-document build. Structural problems of the whole corpus
(duplicate ids, nothing indexable) are raised by `iter_corpus`.
"""
from __future__ import annotations

import io
import json
import os
import re
from pathlib import Path
from typing import Iterator

from .doc import Doc
from .formats import DOC_EXTS, read_docx, read_epub, read_odt, read_pdf
from .html import html_to_text
from .report import IngestReport
from .text import sniff_bom

ID_KEYS = ("_id", "id", "docid", "doc_id", "pid")
TEXT_KEYS = ("text", "contents", "passage", "body")
TEXT_EXTS = {".txt", ".md", ".markdown", ".text", ".rst", ".adoc", ".asciidoc", ".org", ".tex"}
HTML_EXTS = {".html", ".htm"}
JSON_EXTS = {".jsonl", ".json", ".ndjson"}
PARQUET_EXTS = {".parquet"}
SUPPORTED = TEXT_EXTS | HTML_EXTS | JSON_EXTS | PARQUET_EXTS | DOC_EXTS

_BINARY_SNIFF = 8192
DEFAULT_MAX_DOC_MB = 64.0


class Limits:
    """Per-corpus reading limits: documents above `max_doc_bytes` are skipped and counted."""

    def __init__(self, max_doc_mb: float = DEFAULT_MAX_DOC_MB):
        self.max_doc_mb = float(max_doc_mb)
        self.max_doc_bytes = int(self.max_doc_mb * (1 << 20))

    def too_big(self, n_bytes: int, where: str, report: IngestReport) -> bool:
        if n_bytes > self.max_doc_bytes:
            report.skip(f"larger than --max-doc-mb {self.max_doc_mb:g}",
                        f"{where} ({n_bytes / (1 << 20):.2f} MB; raise --max-doc-mb to index it)")
            return True
        return False


_REAL_UTF8 = re.compile("[^\x00-\x7f\ufffd]")


def _decode(raw: bytes, where: str, report: IngestReport) -> str:
    enc, skip = sniff_bom(raw[:4])
    if enc and enc != "utf-8":
        try:
            return raw[skip:].decode(enc)
        except UnicodeDecodeError:
            report.warn(f"invalid {enc.upper()} replaced", where)
            return raw[skip:].decode(enc, errors="replace")
    try:
        return raw[skip:].decode("utf-8")
    except UnicodeDecodeError:
        text = raw[skip:].decode("utf-8", errors="replace")
    if _REAL_UTF8.search(text):      # UTF-8 (its multi-byte characters decode) with damaged bytes
        report.warn("invalid UTF-8 replaced", where)
        return text
    # not one valid multi-byte sequence: a legacy one-byte or CJK encoding ("caf\xe9" is latin-1's
    # café, which UTF-8 would store as U+FFFD, so "café" found nothing)
    enc, text = _guess(raw[skip:])
    report.warn(f"not UTF-8: read as {enc} (guessed)", where)
    return text


def _guess(raw: bytes) -> tuple[str, str]:
    """(encoding, text) of bytes that are not UTF-8: Windows-1252 (latin-1's superset, the most
    common by far) unless it reads as a mess, then charset-normalizer's guess (Cyrillic, Greek,
    Central European, CJK). Measured on short samples in 11 encodings: 9 right; charset-normalizer
    alone 6 (it takes latin-1 for cp1250 or cp775, curly quotes for cp437)."""
    from charset_normalizer import from_bytes
    from charset_normalizer.md import mess_ratio

    try:
        western = raw.decode("cp1252")
        if mess_ratio(western, 1.0) <= 0.1:
            return "windows-1252", western
    except UnicodeDecodeError:       # 5 bytes Windows-1252 leaves undefined
        western = None
    best = from_bytes(raw).best()
    if best is not None:
        return best.encoding, str(best)
    return ("windows-1252", western) if western is not None else ("latin-1", raw.decode("latin-1"))


def _read_bytes(path: Path, where: str, report: IngestReport, limits: Limits, binary: bool = False) -> bytes | None:
    try:
        with path.open("rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if limits.too_big(size, where, report):
                return None
            raw = fh.read(limits.max_doc_bytes + 1)
    except OSError as e:
        report.skip("unreadable", f"{where} ({e.strerror or e})")
        return None
    if limits.too_big(len(raw), where, report):  # grew while we read it
        return None
    if not binary and sniff_bom(raw[:4])[0] is None and b"\x00" in raw[:_BINARY_SNIFF]:
        report.skip("binary file", where)
        return None
    return raw


def read_text(path: Path, doc_id: str, report: IngestReport, limits: Limits) -> Iterator[Doc]:
    raw = _read_bytes(path, doc_id, report, limits)
    if raw is None:
        return
    text = _decode(raw, doc_id, report)
    del raw
    title = _heading(text, path.suffix.lower()) or path.stem
    if not text.strip():
        report.skip("empty document", doc_id)
        return
    yield Doc(doc_id, text, title, {}, source=doc_id, path=doc_id)


def read_one(path: Path, rel: str, report: IngestReport, limits: Limits) -> Iterator[Doc]:
    """The documents of one file, by its extension, in this process (worker.py runs the formats
    that can blow up in a bounded worker that calls this)."""
    ext = path.suffix.lower()
    if ext in TEXT_EXTS:
        return read_text(path, rel, report, limits)
    if ext in HTML_EXTS:
        return read_html(path, rel, report, limits)
    if ext in JSON_EXTS:
        return read_jsonl(path, rel, report, limits)
    if ext in PARQUET_EXTS:
        return read_parquet(path, rel, report, limits)
    if ext in DOC_EXTS:
        return read_document(path, rel, report, limits)
    raise ValueError(f"{rel}: unsupported file type {ext!r}")


def read_document(path: Path, doc_id: str, report: IngestReport, limits: Limits) -> Iterator[Doc]:
    """PDF, DOCX, ODT or EPUB (formats.py), read whole within --max-doc-mb."""
    raw = _read_bytes(path, doc_id, report, limits, binary=True)
    if raw is None:
        return
    ext = path.suffix.lower()
    if ext == ".pdf":
        yield from read_pdf(raw, path, doc_id, report)
        return
    reader = {".docx": read_docx, ".odt": read_odt, ".epub": read_epub}[ext]
    yield from reader(raw, path, doc_id, report, limits.max_doc_bytes, limits.max_doc_mb)


def _heading(text: str, ext: str) -> str | None:
    """The title a lightweight markup file gives itself: Markdown "# T", AsciiDoc "= T", Org
    "#+TITLE: T", reStructuredText's first line over (or between) a line of =, -, ~ or *."""
    lines = [line.strip() for line in text[:4096].lstrip().split("\n")[:4]]
    first = lines[0] if lines else ""
    if ext in {".md", ".markdown"}:
        # the first heading, past the badges, images, HTML and blank lines a README opens with
        for line in text[:8192].split("\n")[:40]:
            line = line.strip()
            if line.startswith("#"):
                return line.lstrip("#").strip() or None
            if line and not line.startswith(("[![", "![", "<", "[!", "---")):
                return None
        return None
    if ext in {".adoc", ".asciidoc"} and first.startswith("= "):
        return first[2:].strip()
    if ext == ".org" and first.lower().startswith("#+title:"):
        return first[8:].strip()
    if ext == ".rst":
        rule = re.compile(r"^([=\-~*#^])\1{2,}$")
        if len(lines) > 2 and rule.match(first) and rule.match(lines[2]):
            return lines[1]
        if len(lines) > 1 and first and rule.match(lines[1]):
            return first
    return None


def read_html(path: Path, doc_id: str, report: IngestReport, limits: Limits) -> Iterator[Doc]:
    raw = _read_bytes(path, doc_id, report, limits)
    if raw is None:
        return
    title, text = html_to_text(_decode(raw, doc_id, report))
    if not text.strip():
        report.skip("empty document", doc_id)
        return
    yield Doc(doc_id, text, title or path.stem, {}, source=doc_id, path=doc_id)


def _record_to_doc(rec, where: str, fallback_id: str, report: IngestReport, path: str | None = None) -> Doc | None:
    """One JSON record / Parquet row as a Doc; its other scalar fields become metadata (filters
    read them), and `path` the file it came from unless the record has its own."""
    if not isinstance(rec, dict):
        report.skip("JSON record is not an object", where)
        return None
    doc_id = next((rec[k] for k in ID_KEYS if rec.get(k) not in (None, "")), None)
    text = next((rec[k] for k in TEXT_KEYS if rec.get(k) is not None), None)
    if text is None:
        report.skip("record without text field", where)
        return None
    if not isinstance(text, str):
        report.skip("text field is not a string", where)
        return None
    title = rec.get("title") or ""
    if not isinstance(title, str):
        title = str(title)
    if not (text.strip() or title.strip()):
        report.skip("empty document", where)
        return None
    # every other field is metadata, nested, list and null values included (check_documents drops
    # and reports what is not JSON, on every path alike)
    # (a `source` or `path` field of the record stays the user's: ldr's own go beside the metadata)
    meta = {k: v for k, v in rec.items() if k not in ID_KEYS and k not in TEXT_KEYS and k != "title"}
    if doc_id is None:
        report.warn("records without an id (assigned FILE#LINE ids)", fallback_id)
        return Doc(fallback_id, text, title, meta, source=where, path=path)
    return Doc(str(doc_id), text, title, meta, source=where, path=path)


def _lines(fh, limit: int):
    """(line number, line or None when longer than `limit`) without ever holding more than
    `limit` characters of one line: an over-long line is read past in pieces."""
    lineno, nl = 0, None
    while True:
        line = fh.readline(limit + 1)
        if not line:
            return
        nl = nl or ("\n" if isinstance(line, str) else b"\n")
        lineno += 1
        if len(line) > limit and not line.endswith(nl):
            while True:  # drain the rest of this line
                rest = fh.readline(1 << 20)
                if not rest or rest.endswith(nl):
                    break
            yield lineno, None
        else:
            yield lineno, line


def read_jsonl(path: Path, rel: str, report: IngestReport, limits: Limits) -> Iterator[Doc]:
    """JSON Lines, streamed line by line; a `.json` file holding one array is also accepted."""
    try:
        fh = path.open("rb")
    except OSError as e:
        report.skip("unreadable", f"{rel} ({e.strerror or e})")
        return
    with fh:
        head = fh.read(_BINARY_SNIFF)
        enc, bom = sniff_bom(head[:4])
        if enc is None and b"\x00" in head:
            report.skip("binary file", rel)
            return
        fh.seek(bom)
        first = head[bom:].decode(enc or "utf-8", errors="replace").lstrip()
        if path.suffix.lower() == ".json" and first.startswith("["):
            # A JSON array cannot be streamed with the standard library: it is read whole, so the
            # whole file is held to the per-document limit.
            if limits.too_big(os.fstat(fh.fileno()).st_size, f"{rel} (a JSON array; convert it to JSONL)", report):
                return
            try:
                records = json.loads(_decode(head[:bom] + fh.read(), rel, report))
            except (json.JSONDecodeError, RecursionError) as e:
                report.skip("malformed JSON", f"{rel} line {getattr(e, 'lineno', '?')}: {getattr(e, 'msg', e)}")
                return
            if not isinstance(records, list):
                records = [records]
            for i, rec in enumerate(records):
                doc = _record_to_doc(rec, f"{rel} item {i}", f"{rel}#{i}", report, rel)
                if doc:
                    yield doc
            return
        # UTF-16/32 files are read as text; UTF-8 as bytes, so that a bad byte costs one line
        src = io.TextIOWrapper(fh, encoding=enc, errors="replace", newline="\n") if enc and enc != "utf-8" else fh
        for lineno, raw in _lines(src, limits.max_doc_bytes):
            where = f"{rel} line {lineno}"
            if raw is None:
                report.skip(f"larger than --max-doc-mb {limits.max_doc_mb:g}", f"{where} (raise --max-doc-mb)")
                continue
            if not raw.strip():
                continue
            try:
                rec = json.loads(raw if isinstance(raw, str) else _decode(raw, where, report))
            except (json.JSONDecodeError, RecursionError) as e:
                report.skip("malformed JSON line", f"{where}: {getattr(e, 'msg', 'nested too deeply')}")
                continue
            doc = _record_to_doc(rec, where, f"{rel}#{lineno}", report, rel)
            if doc:
                yield doc


def read_parquet(path: Path, rel: str, report: IngestReport, limits: Limits, batch_size: int = 64) -> Iterator[Doc]:
    """Parquet with an id column and a text column, streamed row group by row group; a corrupt
    row group is skipped and its remaining rows counted, and the next one is read."""
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path, page_checksum_verification=True)
        md = pf.metadata
    except Exception as e:  # pyarrow raises several unrelated types for bad files
        report.skip("unreadable parquet", f"{rel} ({str(e)[:200]})")
        return
    names = pf.schema_arrow.names
    id_col = next((c for c in ID_KEYS if c in names), None)
    text_col = next((c for c in TEXT_KEYS if c in names), None)
    if text_col is None:
        report.skip("parquet without text column", f"{rel} (columns: {', '.join(names)})")
        return
    import pyarrow as pa

    # other scalar columns are metadata (filters read them); nested and binary ones are not
    scalar = [f.name for f in pf.schema_arrow if f.name not in (id_col, text_col)
              and (pa.types.is_string(f.type) or pa.types.is_large_string(f.type) or pa.types.is_integer(f.type)
                   or pa.types.is_floating(f.type) or pa.types.is_boolean(f.type))]
    cols = [c for c in (id_col, text_col) if c] + scalar
    row = 0
    for g in range(md.num_row_groups):
        group_end = row + md.row_group(g).num_rows
        try:
            for batch in pf.iter_batches(batch_size=batch_size, columns=cols, row_groups=[g]):
                d = batch.to_pydict()
                for i in range(batch.num_rows):
                    rec = {c: d[c][i] for c in cols}
                    where = f"{rel} row {row}"
                    row += 1
                    doc = _record_to_doc(rec, where, f"{rel}#{row - 1}", report, rel)
                    if doc:
                        yield doc
        except Exception as e:  # a corrupt page: pyarrow raises OSError/ArrowException
            lost = group_end - row
            report.skip("corrupt parquet data", f"{rel} rows {row}-{group_end - 1} ({str(e)[:160]})", n=lost)
            row = group_end
