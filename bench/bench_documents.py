"""PDF text extraction: pypdf against pdfminer.six on real documents: the HTML manuals this
machine has (/usr/share/doc: bc, bzip2, fontconfig, base-passwd, json-c) printed to PDF by Chromium
in three layouts (as printed; two columns; scan-like: typewriter font, rotated 0.6 degrees), plus
the two PDF manuals it ships. Text quality: of each manual's sentences (8+ words, from its HTML),
the share an extractor gives back whole (whitespace aside). Speed: seconds per file, best of 3,
both extractors in the same run.

    python bench/bench_documents.py [--out bench/figures/bench_documents.json]
"""
from __future__ import annotations

import argparse
import io
import json
import logging
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

HTML = ["base-passwd/users-and-groups.html", "bc/bc.html", "bzip2/manual.html", "fontconfig/fontconfig-user.html",
        "libjson-c5/README.html"]
PDFS = ["libtasn1-doc/libtasn1.pdf", "shared-mime-info/shared-mime-info-spec.pdf"]
LAYOUTS = {"printed": "", "two-columns": "body{column-count:2;column-gap:2em}",
           "scan-like": "body{background:#efe9d8;font-family:'Courier New',monospace} p,li,pre,dd{transform:rotate(.6deg)}"}


def pypdf_text(raw: bytes) -> str:
    import pypdf

    logging.getLogger("pypdf").setLevel(logging.ERROR)
    return "\n".join(p.extract_text() or "" for p in pypdf.PdfReader(io.BytesIO(raw)).pages)


def pdfminer_text(raw: bytes) -> str:
    from pdfminer.high_level import extract_text

    return extract_text(io.BytesIO(raw))


EXTRACTORS = {"pypdf": pypdf_text, "pdfminer": pdfminer_text}


def best_of(fn, raw: bytes, n: int = 3) -> tuple[float, str]:
    times, text = [], ""
    for _ in range(n):
        t = time.perf_counter()
        text = fn(raw)
        times.append(time.perf_counter() - t)
    return min(times), text


def sentences(html: str) -> list[str]:
    from ldr.corpus.html import html_to_text

    text = " ".join(html_to_text(html)[1].split())
    return [s for s in re.split(r"(?<=[.!?])\s+", text) if len(s.split()) >= 8 and len(s) < 400]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench/figures/bench_documents.json")
    args = ap.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        jobs = []
        for rel in HTML:
            src = Path("/usr/share/doc", rel)
            if not (src.is_file() and chromium):
                continue
            html = src.read_text("utf-8", "replace")
            for layout, css in LAYOUTS.items():
                page = Path(tmp, f"{src.stem}-{layout}.html")
                page.write_text(html.replace("</head>", f"<style>{css}</style></head>", 1) if css else html, "utf-8")
                out = page.with_suffix(".pdf")
                subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-pdf-header-footer",
                                f"--print-to-pdf={out}", page.as_uri()], check=True, capture_output=True, timeout=120)
                jobs.append((f"{rel} ({layout})", layout, out.read_bytes(), sentences(html)))
        jobs += [(rel, "pdf", Path("/usr/share/doc", rel).read_bytes(), None) for rel in PDFS
                 if Path("/usr/share/doc", rel).is_file()]
        for name, layout, raw, truth in jobs:
            row = {"file": name, "layout": layout, "kb": round(len(raw) / 1024)}
            texts = {}
            for ex, fn in EXTRACTORS.items():
                row[f"{ex}_s"], texts[ex] = best_of(fn, raw)
                if truth:
                    flat = " ".join(texts[ex].split())
                    row[f"{ex}_sentences_whole"] = round(sum(s in flat for s in truth) / len(truth), 3)
            a, b = (set(t.split()) for t in texts.values())
            row["shared_vocabulary"] = round(len(a & b) / max(1, len(a | b)), 3)
            rows.append(row)
            print(json.dumps(row), flush=True)
    summary = {}
    for layout in [*LAYOUTS, "pdf"]:
        got = [r for r in rows if r["layout"] == layout]
        if got:
            summary[layout] = {f"{ex}_{m}": round(sum(r.get(f"{ex}_{m}", 0) for r in got) / len(got), 3)
                               for ex in EXTRACTORS for m in ("s", "sentences_whole")}
    print(json.dumps(summary, indent=1))
    Path(args.out).write_text(json.dumps({"files": rows, "by_layout": summary}, indent=1) + "\n")


if __name__ == "__main__":
    main()
