"""Issue 36: a service returns a typed result, never a record as a dict, so every face (CLI
text and JSON, API, dashboard) renders the one object and none computes a figure of its own.

Read from the source (no import): a public module-level function of the service packages whose
return annotation holds `dict[str, ...]` (a record by key) fails, unless it is listed below with
why. A mapping by id (`dict[int, Counts]`) is an index, not a record, and passes.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from senddock.audience import lists, subscribers, suppressions
from senddock.bounces import parse, store
from senddock.campaigns.recipients import COLUMNS, RecipientRow
from senddock.views import plain

SRC = Path(__file__).resolve().parent.parent / "src" / "senddock"

# Faces (they render) and test support.
SKIPPED = ("cli/", "web/", "testing/")

# Still a dict, and why: none is a record.
ALLOWED = {
    # A limit per window kind, iterated: a mapping over ("second", "minute", "hour").
    "delivery/ratelimit.py:limits_of",
    # A statement's SQL and its parameters, as psycopg takes them: not a result.
    "audience/segment_filter.py:narrow",
    # The named parameters of recipients.sql's statements, as psycopg takes them: not a result.
    "campaigns/recipients.py:filtered",
}


CONTAINERS = ("list", "tuple", "Sequence", "Iterator", "Optional")


def _records_by_key(annotation: ast.expr) -> bool:
    """Whether a returned value is, or holds in a list, tuple or union, a `dict[str, ...]`
    (or a bare dict): a record by key. Inside another generic (a connection's row type) a
    dict is not a returned value."""
    if isinstance(annotation, ast.Name):
        return annotation.id in ("dict", "Dict")
    if isinstance(annotation, ast.BinOp):  # X | None
        return _records_by_key(annotation.left) or _records_by_key(annotation.right)
    if not isinstance(annotation, ast.Subscript):
        return False
    outer = ast.unparse(annotation.value)
    args = annotation.slice.elts if isinstance(annotation.slice, ast.Tuple) else [annotation.slice]
    if outer in ("dict", "Dict"):
        return ast.unparse(args[0]) == "str"
    return outer in CONTAINERS and any(_records_by_key(a) for a in args)


def dict_returning() -> set[str]:
    found = set()
    for path in sorted(SRC.rglob("*.py")):
        name = path.relative_to(SRC).as_posix()
        if name.startswith(SKIPPED) or "/" not in name:
            continue
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            if node.name.startswith("_") or node.returns is None:
                continue
            if _records_by_key(node.returns):
                found.add(f"{name}:{node.name}")
    return found


def test_no_public_service_function_returns_a_record_as_a_dict() -> None:
    assert dict_returning() <= ALLOWED, "type these, or say in ALLOWED why not"


@pytest.mark.parametrize(
    "annotation, record",
    [
        ("dict[str, Any]", True),
        ("list[dict[str, Any]]", True),
        ("dict[str, Any] | None", True),
        ("tuple[list[dict[str, Any]], int]", True),
        ("dict", True),
        ("dict[int, Counts]", False),
        ("list[ListView]", False),
        ("psycopg.Connection[dict[str, object]]", False),
    ],
)
def test_the_check_tells_a_record_from_an_index(annotation: str, record: bool) -> None:
    assert _records_by_key(ast.parse(annotation, mode="eval").body) is record


def test_the_typed_results_render_to_the_keys_the_faces_always_showed() -> None:
    """The API schemas and `--json` read these keys: the dataclasses keep them, in order."""
    fields: dict[type, list[str]] = {
        subscribers.SubscriberView: [
            "id", "email", "name", "status", "attributes", "created_at", "updated_at",
            "lists", "suppressed", "messages",
        ],
        lists.ListView: [
            "id", "name", "description", "double_opt_in", "from_addr", "public",
            "consent_text", "confirmed", "unconfirmed", "unsubscribed", "suppressed",
        ],
        suppressions.SuppressionRow: [
            "email", "reason", "created_at", "source_broadcast_id", "detail", "bounce_reason",
        ],
        parse.ParsedLine: ["file", "recipient", "kind", "reason", "status", "reply", "diagnostic"],
        store.FindingPage: ["items", "more"],
        RecipientRow: [
            "email", "status", "failure", "attempts", "sent_at", "message_id", "last_code",
            "last_enhanced", "last_reply", "last_stage", "settled_by", "settled_at",
        ],
    }  # fmt: skip
    for cls, keys in fields.items():
        assert [f.name for f in dataclasses.fields(cls)] == keys, cls.__name__
    # The CSV export's columns, in order, are the row's fields (the stage apart).
    shown = [k for k in fields[RecipientRow] if k != "last_stage"]
    assert list(COLUMNS) == shown
    line = parse.ParsedLine("f.eml", None, "none", None, None, None, "no bounce")
    assert list(plain(line)) == fields[parse.ParsedLine]
