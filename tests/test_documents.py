"""Documents as users bring them (issue 58): PDFs printed by Chromium (pages, two columns, a
scan-like one, one with no text layer, an encrypted one), DOCX written by python-docx, ODT and EPUB
as their formats define them, Latin-1 and Windows-1251 text, reStructuredText. Each is found by a
fact from its middle with the default index; a PDF's passages say their page; what cannot be read
is a counted skip with its reason."""
from __future__ import annotations

import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

import ldr
from ldr.corpus import IngestReport, iter_corpus

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _filler(seed: int, n: int) -> list[str]:
    from faker import Faker

    fake = Faker("en_US")
    fake.seed_instance(seed)
    return [fake.paragraph(nb_sentences=6) for _ in range(n)]


def _pdf(html: str, out: Path) -> None:
    src = out.with_suffix(".html")
    src.write_text(html, "utf-8")
    subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-pdf-header-footer",
                    f"--print-to-pdf={out}", src.as_uri()], check=True, capture_output=True, timeout=120)
    src.unlink()
    assert out.stat().st_size > 1000


# (file, a fact from its middle, the page it is on in a PDF)
FACTS = {
    "report.pdf": ("the inspector found corrosion on the northern bearing plates of the Kestrel viaduct", 3),
    "columns.pdf": ("the Ardmore quarry supplied granite ballast for the sidings", 1),
    "scanned.pdf": ("the harbour master logged forty seven trawlers sheltering from the gale", 1),
    "lease.docx": ("the landlord replaces the Vaillant boiler within ten days of written notice", None),
    "minutes.odt": ("the board elected Marguerite Okafor as treasurer of the rowing club", None),
    "keeper.epub": ("the keeper relit the lamp with the last dry matches from the tin", None),
    "cafe.txt": ("le café de la gare ferme à minuit pendant les travaux", None),
    "most.txt": ("инспектор нашёл коррозию на опорах моста через реку", None),
    "guide.rst": ("install the diaphragm pump before the pressure relief valve", None),
    # issue 76: a README whose badges precede its heading; a name with an accent, asked without it
    "README.md": ("Strombergson signed the salvage contract for the dredger Osprey", None),
}


def _corpus(root: Path) -> None:
    import docx
    import pypdf

    pages = _filler(1, 12)
    body = "".join(f'<div style="break-before:page">{"".join(f"<p>{p}</p>" for p in pages[i * 3:(i + 1) * 3])}'
                   + (f"<p>In the spring survey {FACTS['report.pdf'][0]}.</p>" if i == 2 else "")
                   + "".join(f"<p>{p}</p>" for p in _filler(10 + i, 2)) + "</div>" for i in range(4))
    _pdf(f"<html><head><title>Viaduct survey</title></head><body>{body}</body></html>", root / "report.pdf")
    cols = _filler(2, 8)
    cols.insert(4, f"Records show {FACTS['columns.pdf'][0]}.")
    _pdf("<html><head><title>Railway history</title><style>body{column-count:2;column-gap:2em}</style></head><body>"
         + "".join(f"<p>{p}</p>" for p in cols) + "</body></html>", root / "columns.pdf")
    scan = _filler(3, 4)
    scan.insert(2, f"That night {FACTS['scanned.pdf'][0]}.")
    _pdf("<html><head><title>Harbour log</title><style>body{background:#efe9d8;font-family:'Courier New',monospace}"
         "p{transform:rotate(.6deg);color:#3a3a3a;letter-spacing:.4px}</style></head><body>"
         + "".join(f"<p>{p}</p>" for p in scan) + "</body></html>", root / "scanned.pdf")
    _pdf("<html><body><canvas id=c width=700 height=300></canvas><script>const x=document.getElementById('c')"
         ".getContext('2d');x.font='22px serif';x.fillText('Only pixels here, as in a scan without OCR',10,60)"
         "</script></body></html>", root / "pixels.pdf")
    writer = pypdf.PdfWriter(clone_from=root / "columns.pdf")
    writer.encrypt("s3cret")
    with open(root / "locked.pdf", "wb") as fh:
        writer.write(fh)

    d = docx.Document()
    d.core_properties.title = "Tenancy agreement"
    d.add_heading("Tenancy agreement", 0)
    for p in _filler(4, 3):
        d.add_paragraph(p)
    d.add_paragraph(f"Repairs: {FACTS['lease.docx'][0]}.")
    table = d.add_table(rows=2, cols=2)
    for (r, c), v in {(0, 0): "deposit", (0, 1): "two months", (1, 0): "term", (1, 1): "three years"}.items():
        table.cell(r, c).text = v
    for p in _filler(5, 3):
        d.add_paragraph(p)
    d.save(root / "lease.docx")

    ns = ('xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" '
          'xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0"')
    paras = "".join(f"<text:p>{p}</text:p>" for p in _filler(6, 3))
    with zipfile.ZipFile(root / "minutes.odt", "w") as z:
        z.writestr("mimetype", "application/vnd.oasis.opendocument.text")
        z.writestr("content.xml", f'<?xml version="1.0"?><office:document-content {ns}><office:body><office:text>'
                   f"<text:h>Minutes</text:h>{paras}<text:soft-page-break/><text:p>Votes:<text:s text:c=\"2\"/>"
                   f"{FACTS['minutes.odt'][0]}.</text:p>{paras}</office:text></office:body></office:document-content>")
    with zipfile.ZipFile(root / "keeper.epub", "w") as z:
        z.writestr("mimetype", "application/epub+zip")
        z.writestr("META-INF/container.xml", '<?xml version="1.0"?><container version="1.0" xmlns="urn:oasis:names:'
                   'tc:opendocument:xmlns:container"><rootfiles><rootfile full-path="OPS/book.opf"/></rootfiles>'
                   "</container>")
        z.writestr("OPS/book.opf", '<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" version="3.0">'
                   '<metadata xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:title>The Keeper</dc:title></metadata>'
                   '<manifest><item id="b" href="text/b.xhtml"/><item id="a" href="text/a.xhtml"/></manifest>'
                   '<spine><itemref idref="a"/><itemref idref="b"/></spine></package>')
        for name, paras in (("a", _filler(7, 3)), ("b", _filler(8, 3))):
            extra = f"<p>At dusk {FACTS['keeper.epub'][0]}.</p>" if name == "b" else ""
            z.writestr(f"OPS/text/{name}.xhtml", '<html xmlns="http://www.w3.org/1999/xhtml"><body>'
                       + "".join(f"<p>{p}</p>" for p in paras[:2]) + extra + f"<p>{paras[2]}</p></body></html>")
    (root / "cafe.txt").write_bytes(("Notes de voyage. " * 20 + f"Attention: {FACTS['cafe.txt'][0]}. "
                                     + "Le train part à l'heure. " * 20).encode("latin-1"))
    (root / "most.txt").write_bytes(("Отчёт о мосте. " * 20 + f"В мае {FACTS['most.txt'][0]}. "
                                     + "Работы продолжаются. " * 20).encode("cp1251"))
    (root / "README.md").write_text("[![CI](https://ci.example/badge.svg)](https://ci.example) "
                                    "[![PyPI](https://pypi.example/v.svg)](https://pypi.example)\n\n"
                                    "# Salvage log\n\n" + "\n\n".join(_filler(12, 2))
                                    + "\n\nIn March Strömbergson signed the salvage contract for the dredger Osprey.\n\n"
                                    + "\n\n".join(_filler(13, 2)), "utf-8")
    (root / "guide.rst").write_text("Pump guide\n==========\n\n" + "\n\n".join(_filler(9, 2))
                                    + f"\n\nFirst, {FACTS['guide.rst'][0]}.\n\n" + "\n\n".join(_filler(11, 2)), "utf-8")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    if not CHROMIUM:
        pytest.skip("no chromium to print PDFs (apt-get install chromium)")
    root = tmp_path_factory.mktemp("documents")
    corpus = root / "corpus"
    corpus.mkdir()
    _corpus(corpus)
    report = IngestReport()
    index = ldr.Index.build(str(corpus), str(root / "idx"), report=report)
    yield index, report, corpus
    index.close()


def test_every_document_is_found_by_a_fact_from_its_middle(built):
    index, _, _ = built
    for name, (fact, page) in FACTS.items():
        hits = index.search(fact, k=3, passages=1)
        assert hits[0].id == name, (name, [h.id for h in hits])
        p = hits[0].passages[0]
        if page is None:
            assert p.page is None or name.endswith((".docx", ".odt"))
        else:   # a PDF's passage says the page(s) it spans, and the fact is on one of them
            assert p.page is not None and p.page <= page <= (p.page_end or p.page), (name, p.page, p.page_end)
            assert p.to_dict()["page"] == p.page


def test_what_cannot_be_read_is_a_counted_skip_with_its_reason(built):
    _, report, corpus = built
    files = sorted(f.name for f in corpus.iterdir())
    assert report.indexed + report.n_skipped == len(files) == len(FACTS) + 2
    assert report.skipped == {"PDF without a text layer (a scan? OCR it first, e.g. with ocrmypdf)": 1,
                              "encrypted PDF (a password is needed)": 1}
    # the guessed encoding is reported (charset-normalizer names Windows-1251 "cp1251")
    assert report.warnings == {"not UTF-8: read as windows-1252 (guessed)": 1, "not UTF-8: read as cp1251 (guessed)": 1}


def test_titles_and_texts(built):
    index, _, _ = built
    got = {name: index.document(name) for name in ("report.pdf", "lease.docx", "minutes.odt", "keeper.epub", "guide.rst",
                                              "cafe.txt")}
    assert got["report.pdf"].title == "Viaduct survey"
    assert got["report.pdf"].text.count("\f") == 4            # four pages, each ends with a form feed
    assert got["lease.docx"].title == "Tenancy agreement"
    assert "deposit | two months" in got["lease.docx"].text   # tables are read row by row
    assert got["minutes.odt"].text.count("\f") == 1 and "Votes:  the board" in got["minutes.odt"].text
    assert got["keeper.epub"].title == "The Keeper"
    assert got["keeper.epub"].text.index("At dusk") > len(got["keeper.epub"].text) // 2   # the spine's order
    assert got["guide.rst"].title == "Pump guide"
    assert index.document("README.md").title == "Salvage log"
    assert "café de la gare" in got["cafe.txt"].text


def test_damaged_and_oversized_packages_are_skipped(tmp_path):
    (tmp_path / "broken.pdf").write_bytes(b"%PDF-1.7\n1 0 obj << /Type /Catalog >> garbage")
    (tmp_path / "broken.docx").write_bytes(b"PK\x03\x04 not really a zip")
    with zipfile.ZipFile(tmp_path / "bomb.docx", "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("word/document.xml", b"<" + b" " * (3 << 20) + b">")
    (tmp_path / "fine.txt").write_text("one readable document")
    report = IngestReport()
    docs = list(iter_corpus(tmp_path, report, max_doc_mb=0.25))
    assert [d.id for d in docs] == ["fine.txt"]
    assert report.skipped == {"unreadable PDF": 1, "unreadable DOCX": 1, "larger than --max-doc-mb 0.25": 1}
