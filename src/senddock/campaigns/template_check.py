"""Misspelt names in a campaign's templates, found at create against real subscribers.

The message's own environment (messages/render.py) renders an unknown name as an empty string,
so `{{ subscriber.nmae }}` or `{{ unsubscribe_ur }}` would go out blank to every recipient.
Here the same templates render in a sandbox that is strict about every name except a
subscriber's attributes: an attribute missing for one subscriber is that job's outcome, not a
mistake in the campaign. They render against a few subscribers of the campaign's lists (or a
sample with no attributes when the lists are empty) with the message's own context.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import psycopg
from jinja2 import StrictUndefined, TemplateError, UndefinedError
from jinja2.exceptions import TemplateRuntimeError
from jinja2.utils import missing

from senddock.db import sql
from senddock.messages import CompiledMessage, Recipient, TemplateProblem
from senddock.messages.render import (
    PART_FIELDS,
    SampleAttributes,
    render_checked,
    strict_sandbox,
    template_line,
)
from senddock.messages.sandbox import RenderStopped, limits

QUERIES = sql.load(__package__, "template_check.sql")
SAMPLE = 20  # subscribers the template is checked against


class UnknownName(UndefinedError):
    """A name the template uses that the message's context does not have."""

    def __init__(self, name: str) -> None:
        super().__init__(f"{name!r} is undefined")
        self.name = name


class _Strict(StrictUndefined):
    """Any use of an unknown name fails with UnknownName, naming it (`subscriber.nmae`)."""

    __slots__ = ()

    def __init__(
        self,
        hint: str | None = None,
        obj: Any = missing,
        name: str | None = None,
        exc: type[TemplateRuntimeError] = UndefinedError,
    ) -> None:
        # The sandbox's own refusals (SecurityError) keep their kind.
        super().__init__(hint, obj, name, UnknownName if exc is UndefinedError else exc)

    @property
    def _undefined_message(self) -> str:
        if self._undefined_hint:
            return self._undefined_hint
        name = str(self._undefined_name)
        if isinstance(self._undefined_obj, dict) and "attributes" in self._undefined_obj:
            return f"subscriber.{name}"  # the subscriber: its fields are fixed
        return name


# The message's own sandbox, with its limits on size and time: real subscribers' data may
# make a template that passed compile_message run long.
_TEXT = strict_sandbox(_Strict, autoescape=False)
_HTML = strict_sandbox(_Strict, autoescape=True)


def _sample(conn: psycopg.Connection[dict[str, Any]], list_ids: Sequence[int]) -> list[Recipient]:
    rows = conn.execute(QUERIES["subscribers"], {"lists": list(list_ids), "n": SAMPLE}).fetchall()
    found = [
        Recipient(r["email"], r["name"], SampleAttributes(r["attributes"] or {}), int(r["id"]))
        for r in rows
    ]
    return found or [Recipient("sample@example.com", "Sample", SampleAttributes(), 0)]


def check_names(
    conn: psycopg.Connection[dict[str, Any]],
    list_ids: Sequence[int],
    subject: str,
    text_body: str | None,
    html_body: str | None,
) -> None:
    """TemplateProblem naming the part, line and name of the first unknown name used.

    Only unknown names are judged here; syntax and every other error are compile_message's.
    """
    parts = [("subject", _TEXT, subject), ("text", _TEXT, text_body), ("html", _HTML, html_body)]
    templates = []
    for part, env, source in parts:
        if not source:
            continue
        try:
            templates.append((part, env.from_string(source)))
        except TemplateError:
            continue  # a syntax error: compile_message reports it with its line
    shape = CompiledMessage(subject=None, text=None, html=None, from_header="", from_domain="")
    sample = _sample(conn, list_ids)
    # Every render of the sample shares one clock: once it is out, the rest end at once.
    with limits(), contextlib.suppress(RenderStopped):  # the watchdog between two renders
        _check_sample(templates, shape, sample)


def _check_sample(
    templates: list[tuple[str, Any]], shape: CompiledMessage, sample: list[Recipient]
) -> None:
    for rcpt in sample:
        ctx = shape.context(rcpt, "https://example.invalid/u", "https://example.invalid/p")
        for part, template in templates:
            try:
                render_checked(template, ctx)
            except UnknownName as exc:
                line = template_line(exc.__traceback__)
                where = f"{part} template" + (f", line {line}" if line else "")
                raise TemplateProblem(
                    f"{where}: {exc.name} is undefined (a misspelt name renders empty)",
                    field=PART_FIELDS[part],
                ) from exc
            except Exception:  # data-dependent (a type, a value): that job's outcome
                continue
