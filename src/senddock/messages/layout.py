"""A campaign's body put into its layout, and Markdown made HTML: template sources, once.

Both work on the *templates*, never on a recipient's message: the layout's `{{ content }}` is
replaced by the body's own template text, so body and layout compile into one template per
part and each message is still one render (bench/render_cost.py). Markdown becomes HTML the
same way, its Jinja tags set aside while markdown-it runs and put back after, with HTML in
Markdown off: a `<script>` written in Markdown arrives as text, and whatever a tag prints is
escaped by the HTML sandbox like any HTML body's.
"""

from __future__ import annotations

import functools
import re
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING

from jinja2 import TemplateSyntaxError, Undefined

from senddock.messages.html_text import _JINJA, html_to_text
from senddock.messages.render import TemplateProblem, strict_sandbox

if TYPE_CHECKING:
    from markdown_it import MarkdownIt

# Where a layout takes the body: `{{ content }}` (whitespace control allowed, no filters).
SLOT = re.compile(r"\{\{-?\s*content\s*-?\}\}")
_SYNTAX = strict_sandbox(Undefined, autoescape=False)  # parses only, for the line numbers


@dataclass(frozen=True)
class Layout:
    """A layout's templates; `text` None: derived from `html`, once."""

    html: str
    text: str | None = None


def has_slot(source: str) -> bool:
    return SLOT.search(source) is not None


def splice(layout: str, body: str) -> str:
    """The layout's template with the body's template text where `{{ content }}` was."""
    return SLOT.sub(lambda _m: body, layout)


@functools.cache
def _markdown() -> MarkdownIt:
    """CommonMark with raw HTML off; links to javascript:, vbscript: and file: are not made
    links. Loaded on first use: a worker that sends no Markdown campaign never needs it."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": False})


def markdown_to_html(source: str) -> str:
    """The HTML template of a Markdown template: tags kept as written, raw HTML escaped."""
    kept: list[str] = []
    mark = "sdj" + secrets.token_hex(4)

    def set_aside(m: re.Match[str]) -> str:
        kept.append(m.group(0))
        return f"{mark}n{len(kept) - 1}z"

    html = _markdown().render(_JINJA.sub(set_aside, source))
    return re.sub(mark + r"n(\d+)z", lambda m: kept[int(m.group(1))], html)


def check_markdown_syntax(source: str) -> None:
    """TemplateProblem naming the Markdown's own line of a Jinja syntax error."""
    try:
        _SYNTAX.parse(source)
    except TemplateSyntaxError as exc:
        raise TemplateProblem(
            f"markdown template, line {exc.lineno}: {exc.message}", field="markdown_body"
        ) from exc


def bodies(
    layout: Layout | None,
    text_body: str | None,
    html_body: str | None,
    markdown_body: str | None = None,
) -> tuple[str | None, str | None]:
    """(text, HTML) template sources of a campaign's message, its layout around them.

    A Markdown body is the HTML body. Without a text body the text part is derived from the
    body's HTML (compile_message does it when there is no layout). A text-only campaign with a
    layout gets the layout's text part only.
    """
    html = markdown_to_html(markdown_body) if markdown_body else html_body
    if layout is None:
        return text_body, html
    text = text_body or (html_to_text(html) if html else "")
    layout_text = layout.text if layout.text is not None else html_to_text(layout.html)
    return splice(layout_text, text), splice(layout.html, html) if html else None
