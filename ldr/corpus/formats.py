"""Office and publishing formats: PDF (pypdf), DOCX (python-docx), ODT and EPUB (their XML, read
with the standard library). Each yields one Doc per file or counts the file as skipped, with why.

A page break is a form feed ("\\f", the page break of plain text: RFCs and `pdftotext` write it;
a PDF's every page ends with one),
after a newline so no model tokenizer joins the words on either side (BERT's drops control
characters). A passage's page is then the number of form feeds before it (search/passages.py).
pypdf was chosen over pdfminer.six by measurement (bench/bench_documents.py, 5 real manuals printed
three ways): 2.5x faster, and more sentences whole as printed (0.994 vs 0.950) and in two columns
(0.765 vs 0.662); pdfminer keeps more on slightly rotated text (0.934 vs 0.680: pypdf joins two
lines of a skewed scan without a space).
"""
from __future__ import annotations

import io
import logging
import posixpath
import zipfile
from pathlib import Path
from typing import Iterator
from xml.etree import ElementTree

from .doc import Doc
from .html import html_to_text
from .report import IngestReport

PAGE_BREAK = "\n\f"
DOC_EXTS = {".pdf", ".docx", ".odt", ".epub"}
# a packed format's XML is several times its text: what it may unpack to, per --max-doc-mb of text
_UNPACK_FACTOR = 8


def _doc(text: str, title: str, doc_id: str, report: IngestReport, empty: str) -> Iterator[Doc]:
    if not text.strip():
        report.skip(empty, doc_id)
        return
    yield Doc(doc_id, text, title, {}, source=doc_id, path=doc_id)


def read_pdf(raw: bytes, path: Path, doc_id: str, report: IngestReport) -> Iterator[Doc]:
    import pypdf

    quiet = logging.getLogger("pypdf")
    level, quiet.level = quiet.level, logging.ERROR     # pypdf warns per odd object, thousands a file
    try:
        reader = pypdf.PdfReader(io.BytesIO(raw))
        if reader.is_encrypted and not reader.decrypt(""):
            report.skip("encrypted PDF (a password is needed)", doc_id)
            return
        pages, bad = [], 0
        for page in reader.pages:
            try:
                pages.append((page.extract_text() or "").strip("\n"))
            except Exception:      # one damaged page (pypdf raises many types): the others are read
                pages.append("")
                bad += 1
        meta = reader.metadata
        title = meta.title if meta is not None and isinstance(meta.title, str) else ""
    except Exception as e:   # a damaged file: pypdf raises PdfReadError, ValueError, KeyError, ...
        report.skip("unreadable PDF", f"{doc_id} ({type(e).__name__}: {str(e)[:160]})")
        return
    finally:
        quiet.level = level
    if bad:
        report.warn("PDF pages unreadable (left empty)", f"{doc_id} ({bad} of {len(pages)})")
    # every page ends with a break, as pdftotext writes them: a one-page PDF's passages say page 1
    yield from _doc("".join(p + PAGE_BREAK for p in pages), title.strip() or path.stem, doc_id, report,
                    "PDF without a text layer (a scan? OCR it first, e.g. with ocrmypdf)")


def _unpack_budget(z: zipfile.ZipFile, doc_id: str, report: IngestReport, limit: int, mb: float) -> bool:
    total = sum(i.file_size for i in z.infolist())
    if total > _UNPACK_FACTOR * limit:
        report.skip(f"larger than --max-doc-mb {mb:g}",
                    f"{doc_id} (unpacks to {total / (1 << 20):.0f} MB; raise --max-doc-mb to index it)")
        return False
    return True


class _OverBudget(Exception):
    """A packed file whose text or XML would pass its budget (--max-doc-mb): a counted skip."""


def _member(z: zipfile.ZipFile, name: str, budget: list[int]) -> bytes:
    """A zip member inflated within what is left of `budget` ([bytes]): a member that declares
    less than it holds stops at the budget instead of being inflated whole."""
    with z.open(name) as fh:
        data = fh.read(budget[0] + 1)
    if len(data) > budget[0]:
        raise _OverBudget(f"unpacks past {_UNPACK_FACTOR}x --max-doc-mb")
    budget[0] -= len(data)
    return data


def _too_big(report: IngestReport, doc_id: str, mb: float, why: str) -> None:
    report.skip(f"larger than --max-doc-mb {mb:g}", f"{doc_id} ({why}; raise --max-doc-mb to index it)")


def read_docx(raw: bytes, path: Path, doc_id: str, report: IngestReport, limit: int, mb: float) -> Iterator[Doc]:
    import docx
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    try:
        with zipfile.ZipFile(io.BytesIO(raw)) as z:
            if not _unpack_budget(z, doc_id, report, limit, mb):
                return
        d = docx.Document(io.BytesIO(raw))
        parts: list[str] = []
        for child in d.element.body.iterchildren():
            tag = child.tag.rsplit("}", 1)[-1]
            if tag == "p":
                p = Paragraph(child, d)
                # Word's own pagination when it saved the file, or an explicit page break
                if parts and (p.contains_page_break or child.xpath(".//w:br[@w:type='page']")):
                    parts.append("\f")
                parts.append(p.text)
            elif tag == "tbl":
                for row in Table(child, d).rows:
                    parts.append(" | ".join(c.text.strip() for c in row.cells))
        title = (d.core_properties.title or "").strip()
    except Exception as e:   # not a zip, no document part, bad XML: many types
        report.skip("unreadable DOCX", f"{doc_id} ({type(e).__name__}: {str(e)[:160]})")
        return
    text = "\n".join(parts)        # a page break part is "\n\f\n": PAGE_BREAK then a newline
    yield from _doc(text, title or path.stem, doc_id, report, "empty document")


_NS = {"text": "urn:oasis:names:tc:opendocument:xmlns:text:1.0",
       "office": "urn:oasis:names:tc:opendocument:xmlns:office:1.0",
       "dc": "http://purl.org/dc/elements/1.1/"}
_T = "{%s}" % _NS["text"]


def _odt_text(el, out: list[str], left: list[int]) -> None:
    """The text of an ODF element in document order: spaces (<text:s c=N/>), tabs, line breaks
    and LibreOffice's page breaks (<text:soft-page-break/>) written out; at most `left` ([chars])
    characters (a 414-byte file's `<text:s c="2000000000"/>` is not written out)."""
    tag = el.tag
    if tag == _T + "s":
        c = el.get(_T + "c", "1") or "1"
        n = int(c) if c.isdigit() else 1          # a non-numeric count is one space, as LibreOffice reads it
        _put(out, left, " " * max(0, min(n, left[0] + 1)))
    elif tag == _T + "tab":
        _put(out, left, "\t")
    elif tag == _T + "line-break":
        _put(out, left, "\n")
    elif tag == _T + "soft-page-break":
        _put(out, left, PAGE_BREAK + "\n")
    elif el.text:
        _put(out, left, el.text)
    for child in el:
        _odt_text(child, out, left)
        if child.tail:
            _put(out, left, child.tail)
    if tag in (_T + "p", _T + "h"):
        _put(out, left, "\n")


def _put(out: list[str], left: list[int], piece: str) -> None:
    out.append(piece)
    left[0] -= len(piece)
    if left[0] < 0:
        raise _OverBudget("its text is larger")


def read_odt(raw: bytes, path: Path, doc_id: str, report: IngestReport, limit: int, mb: float) -> Iterator[Doc]:
    out: list[str] = []
    try:
        with zipfile.ZipFile(io.BytesIO(raw)) as z:
            if not _unpack_budget(z, doc_id, report, limit, mb):
                return
            budget = [_UNPACK_FACTOR * limit]
            body = ElementTree.fromstring(_member(z, "content.xml", budget)).find("office:body", _NS)
            title = ""
            if "meta.xml" in z.namelist():
                t = ElementTree.fromstring(_member(z, "meta.xml", budget)).find(".//dc:title", _NS)
                title = (t.text or "").strip() if t is not None else ""
        if body is not None:
            _odt_text(body, out, [limit])
    except _OverBudget as e:
        _too_big(report, doc_id, mb, str(e))
        return
    except Exception as e:   # not a zip, no content.xml, bad XML, nesting deeper than Python's stack
        report.skip("unreadable ODT", f"{doc_id} ({type(e).__name__}: {str(e)[:160]})")
        return
    text = "\n".join(line.rstrip(" \t") for line in "".join(out).split("\n")).strip("\n")
    yield from _doc(text, title or path.stem, doc_id, report, "empty document")


def read_epub(raw: bytes, path: Path, doc_id: str, report: IngestReport, limit: int, mb: float) -> Iterator[Doc]:
    """An EPUB's chapters in reading order (its spine), each read as HTML."""
    container = "{urn:oasis:names:tc:opendocument:xmlns:container}"
    opf_ns = "{http://www.idpf.org/2007/opf}"
    try:
        with zipfile.ZipFile(io.BytesIO(raw)) as z:
            if not _unpack_budget(z, doc_id, report, limit, mb):
                return
            budget = [_UNPACK_FACTOR * limit]
            root = ElementTree.fromstring(_member(z, "META-INF/container.xml", budget))
            opf_path = root.find(f".//{container}rootfile").get("full-path")
            opf = ElementTree.fromstring(_member(z, opf_path, budget))
            base = posixpath.dirname(opf_path)
            items = {i.get("id"): i.get("href") for i in opf.iter(opf_ns + "item")}
            chapters, done, budget, left = [], set(), [_UNPACK_FACTOR * limit], limit
            for ref in opf.iter(opf_ns + "itemref"):
                href = items.get(ref.get("idref"))
                if href:   # names inside the archive only: nothing is read from the file system
                    name = posixpath.normpath(posixpath.join(base, href.split("#", 1)[0]))
                    if name in done:       # a spine naming one chapter 20,000 times reads it once
                        continue
                    done.add(name)
                    chapters.append(html_to_text(_member(z, name, budget).decode("utf-8", "replace"))[1])
                    left -= len(chapters[-1])
                    if left < 0:
                        raise _OverBudget("its text is larger")
            t = opf.find(".//{%s}title" % _NS["dc"])
            title = (t.text or "").strip() if t is not None else ""
    except _OverBudget as e:
        _too_big(report, doc_id, mb, str(e))
        return
    except Exception as e:   # not a zip, no container or package file, a missing chapter
        report.skip("unreadable EPUB", f"{doc_id} ({type(e).__name__}: {str(e)[:160]})")
        return
    yield from _doc("\n\n".join(c for c in chapters if c.strip()), title or path.stem, doc_id, report,
                    "empty document")
