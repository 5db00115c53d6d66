"""One reader per input format. Each yields Docs and reports what it could not use.

Readers never raise for a bad file inside a corpus: they count it in the report, so that one
broken file does not stop a 100k-document build. Structural problems of the whole corpus
(duplicate ids, nothing indexable) are raised by `iter_corpus`.
"""
from __future__ import annotations

import html
import json
from html.parser import HTMLParser
from pathlib import Path
from typing import Iterator

from .doc import Doc
from .report import IngestReport

ID_KEYS = ("_id", "id", "docid", "doc_id", "pid")
TEXT_KEYS = ("text", "contents", "passage", "body")
TEXT_EXTS = {".txt", ".md", ".markdown", ".text"}
HTML_EXTS = {".html", ".htm"}
JSON_EXTS = {".jsonl", ".json", ".ndjson"}
PARQUET_EXTS = {".parquet"}
SUPPORTED = TEXT_EXTS | HTML_EXTS | JSON_EXTS | PARQUET_EXTS

_BINARY_SNIFF = 8192


def _decode(raw: bytes, where: str, report: IngestReport) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        report.warn("invalid UTF-8 replaced", where)
        return raw.decode("utf-8", errors="replace")


def _read_bytes(path: Path, where: str, report: IngestReport) -> bytes | None:
    try:
        raw = path.read_bytes()
    except OSError as e:
        report.skip("unreadable", f"{where} ({e.strerror or e})")
        return None
    if b"\x00" in raw[:_BINARY_SNIFF]:
        report.skip("binary file", where)
        return None
    return raw


def read_text(path: Path, doc_id: str, report: IngestReport) -> Iterator[Doc]:
    raw = _read_bytes(path, doc_id, report)
    if raw is None:
        return
    text = _decode(raw, doc_id, report).lstrip("\ufeff")
    title = path.stem
    if path.suffix.lower() in {".md", ".markdown"}:
        first = text.lstrip().split("\n", 1)[0]
        if first.startswith("#"):
            title = first.lstrip("#").strip() or title
    if not text.strip():
        report.skip("empty document", doc_id)
        return
    yield Doc(doc_id, text, title, {"source": doc_id})


class _HTMLText(HTMLParser):
    """Visible text of an HTML page; <script>/<style> dropped, block tags become newlines."""

    _SKIP = {"script", "style", "noscript", "template"}
    _BLOCK = {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "section",
              "article", "header", "footer", "pre", "blockquote", "table", "ul", "ol"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title_parts: list[str] = []
        self._skip = 0
        self._in_title = False

    def handle_starttag(self, tag, attrs):
        if tag in self._SKIP:
            self._skip += 1
        elif tag == "title":
            self._in_title = True
        elif tag in self._BLOCK:
            self.parts.append("\n")

    def handle_endtag(self, tag):
        if tag in self._SKIP and self._skip:
            self._skip -= 1
        elif tag == "title":
            self._in_title = False
        elif tag in self._BLOCK:
            self.parts.append("\n")

    def handle_data(self, data):
        if self._skip:
            return
        (self.title_parts if self._in_title else self.parts).append(data)


def html_to_text(markup: str) -> tuple[str, str]:
    """(title, text) of an HTML document with tags stripped and whitespace tidied."""
    p = _HTMLText()
    p.feed(markup)
    p.close()
    lines = (" ".join(line.split()) for line in "".join(p.parts).split("\n"))
    text = "\n".join(line for line in lines if line)
    return " ".join("".join(p.title_parts).split()), html.unescape(text) if "&" in text else text


def read_html(path: Path, doc_id: str, report: IngestReport) -> Iterator[Doc]:
    raw = _read_bytes(path, doc_id, report)
    if raw is None:
        return
    title, text = html_to_text(_decode(raw, doc_id, report))
    if not text.strip():
        report.skip("empty document", doc_id)
        return
    yield Doc(doc_id, text, title or path.stem, {"source": doc_id})


def _record_to_doc(rec, where: str, fallback_id: str, report: IngestReport) -> Doc | None:
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
    meta = {k: v for k, v in rec.items() if k not in ID_KEYS and k not in TEXT_KEYS and k != "title"
            and isinstance(v, (str, int, float, bool))}
    meta["source"] = where
    return Doc(str(doc_id) if doc_id is not None else fallback_id, text, title, meta)


def read_jsonl(path: Path, rel: str, report: IngestReport) -> Iterator[Doc]:
    """JSON Lines, streamed line by line; a `.json` file holding one array is also accepted."""
    try:
        fh = path.open("rb")
    except OSError as e:
        report.skip("unreadable", f"{rel} ({e.strerror or e})")
        return
    with fh:
        head = fh.read(_BINARY_SNIFF)
        if b"\x00" in head:
            report.skip("binary file", rel)
            return
        fh.seek(0)
        if path.suffix.lower() == ".json" and head.lstrip().startswith(b"["):
            # A JSON array cannot be streamed with the standard library; it is read whole.
            try:
                records = json.loads(_decode(fh.read(), rel, report))
            except json.JSONDecodeError as e:
                report.skip("malformed JSON", f"{rel} line {e.lineno}: {e.msg}")
                return
            for i, rec in enumerate(records):
                doc = _record_to_doc(rec, f"{rel} item {i}", f"{rel}#{i}", report)
                if doc:
                    yield doc
            return
        for lineno, raw in enumerate(fh, 1):
            if not raw.strip():
                continue
            where = f"{rel} line {lineno}"
            try:
                rec = json.loads(_decode(raw, where, report))
            except json.JSONDecodeError as e:
                report.skip("malformed JSON line", f"{where}: {e.msg}")
                continue
            doc = _record_to_doc(rec, where, f"{rel}#{lineno}", report)
            if doc:
                yield doc


def read_parquet(path: Path, rel: str, report: IngestReport, batch_size: int = 256) -> Iterator[Doc]:
    """Parquet with an id column and a text column, streamed in record batches."""
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except Exception as e:  # pyarrow raises several unrelated types for bad files
        report.skip("unreadable parquet", f"{rel} ({e})")
        return
    names = pf.schema_arrow.names
    id_col = next((c for c in ID_KEYS if c in names), None)
    text_col = next((c for c in TEXT_KEYS if c in names), None)
    if text_col is None:
        report.skip("parquet without text column", f"{rel} (columns: {', '.join(names)})")
        return
    cols = [c for c in (id_col, text_col, "title" if "title" in names else None) if c]
    row = 0
    for batch in pf.iter_batches(batch_size=batch_size, columns=cols):
        d = batch.to_pydict()
        for i in range(batch.num_rows):
            rec = {c: d[c][i] for c in cols}
            doc = _record_to_doc(rec, f"{rel} row {row}", f"{rel}#{row}", report)
            row += 1
            if doc:
                yield doc
