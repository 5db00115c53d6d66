"""The visible text of an HTML page (HTML files, EPUB chapters), with the standard library's parser."""
from __future__ import annotations

from html.parser import HTMLParser


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
    # entities were already decoded by the parser (convert_charrefs): decoding again would turn a
    # literal "&amp;amp;" into "&"
    return " ".join("".join(p.title_parts).split()), text
