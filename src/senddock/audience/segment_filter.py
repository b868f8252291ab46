"""The segment filter language: parsed into an AST, compiled into parameterized SQL.

    attributes.city = "London" and created_at >= 2026-01-01
    attributes.plan in ["pro", "team"] and not exists attributes.churned
    (attributes.score > 3.5 or attributes.vip = true) and email != "ada@example.org"

Grammar (recursive descent, one function a rule; keywords in any case):

    filter   := or EOF
    or       := and ("or" and)*
    and      := unary ("and" unary)*
    unary    := "not" unary | "exists" field | "(" or ")" | test
    test     := field ("=" | "!=" | "<" | "<=" | ">" | ">=") value
              | field ["not"] "in" "[" value ("," value)* "]"
    field    := "email" | "name" | "created_at" | "updated_at" | "attributes" ("." key)+
    value    := "string" (JSON escapes) | number | true | false
              | date (2026-01-01, 2026-01-01T09:30, 2026-01-01T09:30:00+02:00; UTC if no zone)

A comparison with an attribute a subscriber does not have, or whose JSON type is not the
value's (the string "5" against the number 5), is false; `not` turns it true. A date against an
attribute compares the attribute's text with the date's ISO form (attributes hold ISO strings).

Nothing the person wrote becomes SQL text: field names map to fixed columns, attribute keys and
values become placeholders, operators come from a fixed table. The SQL pieces are named blocks
of segment_filter.sql. A bad filter is one line with its column: "segment: expected a value at
column 17".
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

from psycopg import sql as pgsql

from senddock.db import sql
from senddock.errors import Invalid

FRAGMENTS = sql.load(__package__, "segment_filter.sql")

# Bounds on what one filter may ask of the database (every surface takes filters from people).
MAX_LENGTH = 2_000
MAX_DEPTH = 32
MAX_VALUES = 1_000
MAX_EXPONENT = 300

COLUMNS = {"email": "text", "name": "text", "created_at": "time", "updated_at": "time"}
OPERATORS = {"=": "=", "!=": "<>", "<": "<", "<=": "<=", ">": ">", ">=": ">="}
KEYWORDS = {"and", "or", "not", "in", "exists", "true", "false"}

Value = str | Decimal | bool | datetime


class SegmentError(Invalid):
    """A filter that does not parse or cannot be compared as written (422, field `filter`)."""

    def __init__(self, message: str, column: int | None = None) -> None:
        where = f" at column {column}" if column is not None else ""
        super().__init__(f"segment: {message}{where}", field="filter")
        self.column = column


# ----- The AST -----


@dataclass(frozen=True)
class Field:
    """A subscriber column (`path` empty) or an attribute (`column` is "attributes")."""

    column: str
    path: tuple[str, ...] = ()


@dataclass(frozen=True)
class Compare:
    field: Field
    op: str  # a key of OPERATORS
    value: Value


@dataclass(frozen=True)
class In:
    field: Field
    values: tuple[Value, ...]


@dataclass(frozen=True)
class Exists:
    field: Field


@dataclass(frozen=True)
class Not:
    node: Node


@dataclass(frozen=True)
class And:
    nodes: tuple[Node, ...]


@dataclass(frozen=True)
class Or:
    nodes: tuple[Node, ...]


Node = Compare | In | Exists | Not | And | Or


# ----- Tokens -----


@dataclass(frozen=True)
class Token:
    kind: str  # word, string, number, date, op, punct, end
    text: str
    column: int  # 1-based
    value: Any = None


TOKEN = re.compile(
    r"""(?P<space>\s+)
      | (?P<date>\d{4}-\d{2}-\d{2}(?:T\d{2}:\d{2}(?::\d{2}(?:\.\d{1,6})?)?(?:Z|[+-]\d{2}:\d{2})?)?)
      | (?P<number>-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?)
      | (?P<string>"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*")
      | (?P<op>!=|<=|>=|=|<|>)
      | (?P<punct>[()\[\],.])
      | (?P<word>[^\W\d][\w-]*)
    """,
    re.VERBOSE,
)


def tokens(text: str) -> list[Token]:
    """The filter's tokens, ending with an `end` token (SegmentError at the first stray one)."""
    found: list[Token] = []
    at = 0
    while at < len(text):
        m = TOKEN.match(text, at)
        if m is None:
            if text[at] == '"':
                raise SegmentError("unterminated or malformed string", at + 1)
            raise SegmentError(f"unexpected character {text[at]!r}", at + 1)
        kind = m.lastgroup
        assert kind is not None
        if kind != "space":
            found.append(Token(kind, m.group(), at + 1, _literal(kind, m.group(), at + 1)))
        at = m.end()
    found.append(Token("end", "", len(text) + 1))
    return found


def _literal(kind: str, text: str, column: int) -> Any:
    if kind == "string":
        value = json.loads(text)
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise SegmentError("a string holds a lone surrogate (\\uD800)", column) from None
        if "\x00" in value:
            raise SegmentError("a string holds NUL (\\u0000)", column)
        return value
    if kind == "number":
        number = Decimal(text)
        if abs(number.adjusted()) > MAX_EXPONENT:
            raise SegmentError(f"a number is at most 1e{MAX_EXPONENT}", column)
        return number
    if kind == "date":
        try:
            if "T" not in text:
                return datetime.combine(date.fromisoformat(text), datetime.min.time(), UTC)
            when = datetime.fromisoformat(text)
        except ValueError:
            raise SegmentError(f"{text} is not a date", column) from None
        return when if when.tzinfo else when.replace(tzinfo=UTC)
    return None


# ----- The parser -----


class Parser:
    """Recursive descent over `tokens(text)`: `Parser(text).parse()` is the filter's AST."""

    def __init__(self, text: str) -> None:
        if len(text) > MAX_LENGTH:
            raise SegmentError(f"a filter is at most {MAX_LENGTH} characters")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise SegmentError("a filter is not valid text", exc.start + 1) from None
        self.tokens = tokens(text)
        self.at = 0
        self.depth = 0

    @property
    def token(self) -> Token:
        return self.tokens[self.at]

    def keyword(self, *words: str) -> bool:
        t = self.token
        return t.kind == "word" and t.text.lower() in words

    def take(self) -> Token:
        t = self.token
        self.at += 1
        return t

    def expect(self, kind: str, text: str, what: str) -> Token:
        t = self.token
        if t.kind != kind or (t.text.lower() if kind == "word" else t.text) != text:
            raise SegmentError(f"expected {what}", t.column)
        return self.take()

    def parse(self) -> Node:
        if self.token.kind == "end":
            raise SegmentError("the filter is empty")
        node = self.or_()
        if self.token.kind != "end":
            raise SegmentError("expected and, or or the end of the filter", self.token.column)
        return node

    def or_(self) -> Node:
        return self.joined("or", self.and_)

    def and_(self) -> Node:
        return self.joined("and", self.unary)

    def joined(self, word: str, operand: Callable[[], Node]) -> Node:
        """operand (word operand)*: one node, or an And / Or of them."""
        nodes = [operand()]
        while self.keyword(word):
            self.take()
            nodes.append(operand())
        if len(nodes) == 1:
            return nodes[0]
        return Or(tuple(nodes)) if word == "or" else And(tuple(nodes))

    def unary(self) -> Node:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise SegmentError(f"nested more than {MAX_DEPTH} deep", self.token.column)
        try:
            if self.keyword("not"):
                self.take()
                return Not(self.unary())
            if self.keyword("exists"):
                self.take()
                at = self.token.column
                field = self.field()
                if not field.path:
                    raise SegmentError("exists takes an attribute (attributes.KEY)", at)
                return Exists(field)
            if self.token.kind == "punct" and self.token.text == "(":
                self.take()
                node = self.or_()
                self.expect("punct", ")", "')'")
                return node
            return self.test()
        finally:
            self.depth -= 1

    def test(self) -> Node:
        field = self.field()
        t = self.token
        if t.kind == "op":
            self.take()
            return Compare(field, t.text, self.value(field))
        negated = self.keyword("not")
        if negated:
            self.take()
        if self.keyword("in"):
            self.take()
            node: Node = In(field, self.values(field))
            return Not(node) if negated else node
        raise SegmentError("expected a comparison (= != < <= > >=) or in", self.token.column)

    def field(self) -> Field:
        t = self.token
        name = t.text.lower() if t.kind == "word" else ""
        if name in COLUMNS:
            self.take()
            return Field(name)
        if name != "attributes":
            raise SegmentError(
                "expected a field (email, name, created_at, updated_at, attributes.KEY)",
                t.column,
            )
        self.take()
        path: list[str] = []
        while self.token.kind == "punct" and self.token.text == ".":
            self.take()
            key = self.token
            if key.kind == "word":
                path.append(key.text)
            elif key.kind == "string":
                path.append(str(key.value))
            else:
                raise SegmentError("expected an attribute name", key.column)
            self.take()
        if not path:
            raise SegmentError("expected '.' and an attribute name", self.token.column)
        return Field("attributes", tuple(path))

    def value(self, field: Field) -> Value:
        t = self.token
        if t.kind in ("string", "number", "date"):
            value: Value = t.value
        elif self.keyword("true", "false"):
            value = t.text.lower() == "true"
        else:
            raise SegmentError("expected a value", t.column)
        kind = COLUMNS.get(field.column)
        if kind == "text" and not isinstance(value, str):
            raise SegmentError(f"{field.column} compares with a string", t.column)
        if kind == "time" and not isinstance(value, datetime):
            raise SegmentError(f"{field.column} compares with a date (2026-01-01)", t.column)
        self.take()
        return value

    def values(self, field: Field) -> tuple[Value, ...]:
        self.expect("punct", "[", "'['")
        found = [self.value(field)]
        while self.token.kind == "punct" and self.token.text == ",":
            self.take()
            found.append(self.value(field))
            if len(found) > MAX_VALUES:
                raise SegmentError(f"a list holds at most {MAX_VALUES} values", self.token.column)
        self.expect("punct", "]", "',' or ']'")
        return tuple(found)


def parse(text: str) -> Node:
    """The AST of filter `text` (SegmentError: one line with the column)."""
    return Parser(text).parse()


# ----- The compiler -----


@dataclass(frozen=True)
class Condition:
    """A filter as SQL: a boolean expression over the subscriber row `s`, and its parameters.

    Placeholders are named `seg_N`, so the condition composes into any statement whose own
    parameters are named otherwise.
    """

    sql: pgsql.Composable
    params: dict[str, Any]


EVERYONE = Condition(pgsql.SQL(FRAGMENTS["everyone"]), {})


def condition(text: str | None) -> Condition:
    """Filter `text` compiled for the subscriber row `s`; no filter: everyone."""
    if text is None or not text.strip():
        return EVERYONE
    return compile_node(parse(text))


def compile_node(node: Node) -> Condition:
    """The AST `node` as a Condition."""
    params: dict[str, Any] = {}

    def param(value: Any) -> pgsql.Placeholder:
        name = f"seg_{len(params)}"
        params[name] = value
        return pgsql.Placeholder(name)

    def walk(n: Node) -> pgsql.Composable:
        if isinstance(n, And | Or):
            joiner = pgsql.SQL(" AND " if isinstance(n, And) else " OR ")
            return pgsql.SQL("({})").format(joiner.join(walk(x) for x in n.nodes))
        if isinstance(n, Not):
            return pgsql.SQL(FRAGMENTS["negate"]).format(node=walk(n.node))
        if isinstance(n, Exists):
            return pgsql.SQL(FRAGMENTS["attribute_exists"]).format(path=param(list(n.field.path)))
        if isinstance(n, In):
            return walk(Or(tuple(Compare(n.field, "=", v) for v in n.values)))
        return compare(n)

    def compare(n: Compare) -> pgsql.Composable:
        op = pgsql.SQL(OPERATORS[n.op])
        if n.field.column != "attributes":
            kind = "text_column" if COLUMNS[n.field.column] == "text" else "time_column"
            column = pgsql.Identifier("s", n.field.column)
            return pgsql.SQL(FRAGMENTS[kind]).format(column=column, op=op, value=param(n.value))
        path = param(list(n.field.path))
        if isinstance(n.value, datetime):
            iso = n.value.isoformat()
            value = iso[:10] if iso.endswith("T00:00:00+00:00") else iso
            return pgsql.SQL(FRAGMENTS["attribute_date"]).format(
                path=path, op=op, value=param(value)
            )
        if isinstance(n.value, bool):
            kind = "boolean"
        elif isinstance(n.value, Decimal):
            kind = "number"
        else:
            kind = "string"
        return pgsql.SQL(FRAGMENTS["attribute_compare"]).format(
            path=path, type=param(kind), op=op, value=param(_json(n.value))
        )

    return Condition(walk(node), params)


def _json(value: Value) -> str:
    """The value as JSON text (a number exactly as written, never through a float)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Decimal):
        return str(value)
    return json.dumps(value, ensure_ascii=False)


def check(text: str) -> str:
    """Filter `text`, stripped, if it parses (SegmentError otherwise)."""
    parse(text)
    return text.strip()


def narrow(text: str | None) -> tuple[pgsql.Composable, dict[str, Any]]:
    """Filter `text` as the queue's `Narrow` wants it: (condition over `s`, its parameters)."""
    where = condition(text)
    return where.sql, where.params
