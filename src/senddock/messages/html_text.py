"""A plain-text rendering of an HTML body, for the text/plain part when none is given.

Works on the HTML *template*: Jinja tags are set aside before parsing and put back after, so
the text part is compiled once per broadcast like the others (never converted per recipient).
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

_JINJA = re.compile(r"\{\{.*?\}\}|\{%.*?%\}|\{#.*?#\}", re.S)
_MARK = "\x00{}\x00"
_MARKED = re.compile("\x00(\\d+)\x00")

# Elements whose content is no part of the reading text.
_SKIP = {"head", "style", "script", "title", "template", "noscript"}
# Elements that start on a line of their own, and those that also leave a blank line.
_BLOCK = {"div", "section", "article", "header", "footer", "table", "tr", "ul", "ol", "li"}
_PARAGRAPH = {"p", "h1", "h2", "h3", "h4", "h5", "h6", "blockquote", "pre", "hr"}


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self.skipping = 0
        self.pre = 0
        self.links: list[str | None] = []

    def _break(self, n: int) -> None:
        """End the current line, leaving at least n-1 blank lines (never more than asked)."""
        tail = "".join(self.out[-4:])
        have = len(tail) - len(tail.rstrip("\n")) if tail.strip(" ") else n
        self.out.append("\n" * max(0, n - have))

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIP:
            self.skipping += 1
        elif tag == "br":
            self.out.append("\n")
        elif tag in _PARAGRAPH:
            self._break(2)
            if tag == "pre":
                self.pre += 1
            if tag == "hr":
                self.out.append("----------")
                self._break(2)
        elif tag in _BLOCK:
            self._break(1)
            if tag == "li":
                self.out.append("- ")
        elif tag in ("td", "th"):
            self.out.append(" ")
        elif tag == "a":
            self.links.append(dict(attrs).get("href"))
        elif tag == "img":
            alt = dict(attrs).get("alt")
            if alt:
                self.out.append(alt)

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIP:
            self.skipping = max(0, self.skipping - 1)
        elif tag in _PARAGRAPH:
            if tag == "pre":
                self.pre = max(0, self.pre - 1)
            self._break(2)
        elif tag in _BLOCK:
            self._break(1)
        elif tag == "a" and self.links:
            href = self.links.pop()
            if href and not href.startswith(("#", "mailto:")):
                self.out.append(f" ({href})")

    def handle_data(self, data: str) -> None:
        if self.skipping:
            return
        self.out.append(data if self.pre else re.sub(r"[ \t\r\n\f]+", " ", data))

    def text(self) -> str:
        lines = [line.strip() for line in "".join(self.out).split("\n")]
        joined = re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip("\n")
        return joined + "\n" if joined else ""


def html_to_text(source: str) -> str:
    """Readable plain text from HTML: paragraphs, line breaks, list items, link targets."""
    kept: list[str] = []

    def set_aside(m: re.Match[str]) -> str:
        kept.append(m.group(0))
        return _MARK.format(len(kept) - 1)

    parser = _Text()
    parser.feed(_JINJA.sub(set_aside, source))
    parser.close()
    return _MARKED.sub(lambda m: kept[int(m.group(1))], parser.text())
