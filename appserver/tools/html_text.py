"""The readable text of an HTML page, for ``web_fetch``.

The standard library's ``html.parser`` (no HTML library is among the
project's dependencies, and this needs none): scripts, styles and other
non-text elements are dropped, block elements end lines, list items start
with ``- ``, headings with ``#``, links keep their target as
``text (url)``, ``<pre>`` keeps its spacing, and runs of blank lines
collapse. Broken markup never raises: the parser takes what it can.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from urllib.parse import urljoin

# Their content is never text for a reader.
_SKIPPED = {"script", "style", "noscript", "template", "svg", "canvas", "iframe", "object", "head"}
_BLOCKS = {
    "address", "article", "aside", "blockquote", "br", "dd", "details", "div", "dl", "dt",
    "fieldset", "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6",
    "header", "hr", "li", "main", "nav", "ol", "p", "pre", "section", "summary", "table",
    "tbody", "thead", "tfoot", "tr", "ul",
}  # fmt: skip
_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source"}
_SPACES = re.compile(r"[ \t\r\f\v\n]+")
_BLANK_LINES = re.compile(r"\n{3,}")  # lines are right-stripped first
# Blocks that end a paragraph (a blank line after them); other blocks end a line.
_PARAGRAPHS = {"blockquote", "h1", "h2", "h3", "h4", "h5", "h6", "ol", "p", "pre", "table", "ul"}


class _TextExtractor(HTMLParser):
    def __init__(self, base_url: str) -> None:
        super().__init__(convert_charrefs=True)
        self.base_url = base_url
        self.parts: list[str] = []
        self.title: list[str] = []
        self._skipping: list[str] = []  # open skipped elements
        self._in_title = False
        self._pre = 0
        self._links: list[str | None] = []  # href of each open <a>

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self._in_title = True
        if tag == "body":
            self._skipping.clear()  # a <head> never closed ends here
        if self._skipping or tag in _SKIPPED:
            if tag not in _VOID:
                self._skipping.append(tag)
            return
        if tag in _BLOCKS:
            self._break("\n")
        if tag == "pre":
            self._pre += 1
        elif tag == "li":
            self.parts.append("- ")
        elif re.fullmatch(r"h[1-6]", tag):
            self.parts.append("#" * int(tag[1]) + " ")
        elif tag in ("td", "th"):
            at_line_start = not self.parts or self.parts[-1].endswith("\n")
            self.parts.append("| " if at_line_start else " | ")
        elif tag == "a":
            href = dict(attrs).get("href")
            usable = href and not href.startswith(("#", "javascript:"))
            self._links.append(urljoin(self.base_url, href) if usable and href else None)
        elif tag == "img":
            alt = dict(attrs).get("alt")
            if alt:
                self.parts.append(f"[image: {alt}]")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        if self._skipping:
            if tag in self._skipping:
                # Close up to the matching element (unclosed children included).
                while self._skipping and self._skipping.pop() != tag:
                    pass
            return
        if tag == "pre" and self._pre:
            self._pre -= 1
        if tag == "a" and self._links:
            href = self._links.pop()
            if href:
                self.parts.append(f" ({href})")
        if tag in _BLOCKS:
            self._break("\n\n" if tag in _PARAGRAPHS else "\n")

    def _break(self, newlines: str) -> None:
        """End the line (a paragraph: with a blank line), unless already ended."""
        if not self.parts:
            return  # nothing above to separate from
        tail = "".join(self.parts[-3:]).rstrip(" ")
        ended = len(tail) - len(tail.rstrip("\n"))
        if ended < len(newlines):
            self.parts.append(newlines[ended:])

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title.append(data)
        if self._skipping:
            return
        if not self._pre:
            data = _SPACES.sub(" ", data)
            if not self.parts or self.parts[-1].endswith(("\n", " ")):
                data = data.lstrip(" ")
        if data:
            self.parts.append(data)


def html_to_text(html: str, base_url: str = "") -> tuple[str, str]:
    """``(title, text)`` of an HTML document; links resolved against ``base_url``."""
    extractor = _TextExtractor(base_url)
    extractor.feed(html)
    extractor.close()
    lines = (line.rstrip() for line in "".join(extractor.parts).split("\n"))
    text = _BLANK_LINES.sub("\n\n", "\n".join(lines)).strip("\n")
    title = " ".join("".join(extractor.title).split())
    return title, text
