"""The visible text of an HTML page (HTML files, EPUB chapters).

Parsed with libxml2's HTML parser (lxml, which python-docx already brings) driving the same
event handler as the standard library's parser would: it is linear in the page, where CPython
3.11's `html.parser` is quadratic on unclosed tags (`<a ` x 8,000: 11 s; a 120 KB page: 113 s of
CPU) and raises on some 5-byte inputs (`<![ x`). The standard library's is the fallback."""
from __future__ import annotations

from html.parser import HTMLParser


class _Text:
    """Visible text of an HTML page; <script>/<style> dropped, block tags become newlines."""

    _SKIP = {"script", "style", "noscript", "template"}
    _BLOCK = {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "section",
              "article", "header", "footer", "pre", "blockquote", "table", "ul", "ol"}

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.title_parts: list[str] = []
        self._skip = 0
        self._in_title = False

    def start(self, tag, attrs=None):
        if tag in self._SKIP:
            self._skip += 1
        elif tag == "title":
            self._in_title = True
        elif tag in self._BLOCK:
            self.parts.append("\n")

    def end(self, tag):
        if tag in self._SKIP and self._skip:
            self._skip -= 1
        elif tag == "title":
            self._in_title = False
        elif tag in self._BLOCK:
            self.parts.append("\n")

    def data(self, data):
        if self._skip:
            return
        (self.title_parts if self._in_title else self.parts).append(data)

    def comment(self, text):
        pass

    def close(self):
        return None


class _StdParser(HTMLParser):
    """The standard library's parser driving the same handler (where lxml is missing)."""

    def __init__(self, target: _Text):
        super().__init__(convert_charrefs=True)
        self.target = target

    def handle_starttag(self, tag, attrs):
        self.target.start(tag)

    def handle_endtag(self, tag):
        self.target.end(tag)

    def handle_data(self, data):
        self.target.data(data)


def _feed(markup: str, t: _Text) -> None:
    try:
        from lxml import etree
    except ImportError:
        p = _StdParser(t)
        p.feed(markup)
        p.close()
        return
    # no network, no entity expansion beyond HTML's own, libxml2's size limits kept (huge_tree off)
    p = etree.HTMLParser(target=t, recover=True, no_network=True, remove_pis=True, huge_tree=False)
    p.feed(markup.replace("\x00", ""))      # libxml2 stops at a NUL
    p.close()


def html_to_text(markup: str) -> tuple[str, str]:
    """(title, text) of an HTML document with tags stripped and whitespace tidied."""
    t = _Text()
    if markup.strip():
        _feed(markup, t)
    lines = (" ".join(line.split()) for line in "".join(t.parts).split("\n"))
    text = "\n".join(line for line in lines if line)
    # entities were already decoded by the parser: decoding again would turn a literal "&amp;amp;" into "&"
    return " ".join("".join(t.title_parts).split()), text
