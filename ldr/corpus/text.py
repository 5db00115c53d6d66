"""Text helpers that keep memory proportional to one document (no whole-text copies or word lists)."""
from __future__ import annotations

import codecs
import re

_CHUNK = 1 << 20
_SURROGATE = re.compile("[\ud800-\udfff]")
_WORD = re.compile(r"\S+")

# longest first: the UTF-32 LE mark starts with the UTF-16 LE one
BOMS = ((codecs.BOM_UTF32_LE, "utf-32-le"), (codecs.BOM_UTF32_BE, "utf-32-be"), (codecs.BOM_UTF8, "utf-8"),
        (codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"))


def sniff_bom(head: bytes) -> tuple[str | None, int]:
    """(encoding, BOM length) when `head` starts with a byte-order mark, else (None, 0)."""
    for bom, enc in BOMS:
        if head.startswith(bom):
            return enc, len(bom)
    return None, 0


def _chunks(text: str):
    for i in range(0, len(text), _CHUNK):
        yield text[i:i + _CHUNK]


def utf8_len(text: str) -> int:
    """Bytes of `text` in UTF-8, a megabyte at a time (lone surrogates count 3 bytes)."""
    return sum(len(c.encode("utf-8", "surrogatepass")) for c in _chunks(text))


def count_words(text: str) -> int:
    """Whitespace-separated words, without building the list of all words."""
    n, prev_word = 0, False
    for c in _chunks(text):
        n += sum(1 for _ in _WORD.finditer(c))
        if prev_word and not c[0].isspace():
            n -= 1  # a word split across the chunk boundary was counted twice
        prev_word = not c[-1].isspace()
    return n


def has_surrogates(text: str) -> bool:
    return _SURROGATE.search(text) is not None


def replace_surrogates(text: str) -> str:
    """Lone surrogates (from JSON "\\ud800" escapes or undecodable argv bytes) cannot be stored
    or encoded as UTF-8: replace each with U+FFFD."""
    return _SURROGATE.sub("\ufffd", text)


def text_chunks(text: str, size: int = _CHUNK):
    """Pieces of about `size` characters cut at whitespace, so no word is split (for analysers
    that would otherwise copy a whole 100 MB document into one list of tokens)."""
    start, n = 0, len(text)
    while start < n:
        end = min(n, start + size)
        if end < n:
            cut = text.rfind(" ", start, end)
            if cut <= start:
                cut = max(text.rfind("\n", start, end), text.rfind("\t", start, end))
            end = cut + 1 if cut > start else end
        yield text[start:end]
        start = end


def page_of(text: str, offset: int) -> int | None:
    """1-based page of a character offset in a text whose pages end with a form feed (PDFs as
    ldr reads them, RFCs), None when the text has no page breaks."""
    if "\f" not in text:
        return None
    return text.count("\f", 0, offset) + 1
