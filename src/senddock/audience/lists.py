"""Lists by name, and their options (double opt-in)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from senddock.db import sql
from senddock.errors import Conflict, Invalid, NotFound

QUERIES = sql.load(__package__, "lists.sql")


class UnknownList(Invalid, LookupError):
    """No list by that name: bad input (422, about `lists`), not an unknown id."""


def ensure_list(conn: psycopg.Connection[dict[str, Any]], name: str) -> int:
    """The id of list `name`, created if it does not exist yet."""
    row = conn.execute(QUERIES["ensure_list"], {"name": name}).fetchone()
    assert row is not None
    return int(row["id"])


def find_list(conn: psycopg.Connection[dict[str, Any]], name: str) -> int:
    """The id of list `name`; UnknownList if there is none."""
    row = conn.execute(QUERIES["find_list"], {"name": name}).fetchone()
    if row is None:
        raise UnknownList(f"no list named {name!r}", field="lists")
    return int(row["id"])


class ListError(Invalid, ValueError):
    """A list setting that cannot be applied (422)."""


def _check_from(from_addr: str | None) -> None:
    """A From address for confirmation requests: one header line, one mailbox, valid."""
    from senddock.audience.addresses import normalize
    from senddock.messages import one_mailbox

    if from_addr is not None:
        normalize(one_mailbox("from", from_addr, field="from_addr"), field="from_addr")


def _opt_in_error(name: str, sender: str = "--from") -> ListError:
    """The table's CHECK refused double opt-in without a From address."""
    return ListError(
        f"list {name!r}: double opt-in needs {sender} (who asks to confirm)", field="from_addr"
    )


def configure(
    conn: psycopg.Connection[dict[str, Any]],
    name: str,
    *,
    description: str | None = None,
    double_opt_in: bool | None = None,
    from_addr: str | None = None,
) -> int:
    """Create list `name` if needed and set its description and options (None keeps one);
    its id, in one transaction. A double opt-in list needs a From address (`--from`)."""
    with conn.transaction():
        list_id = ensure_list(conn, clean_name(name))
        change(
            conn,
            list_id,
            description=description,
            double_opt_in=double_opt_in,
            from_addr=from_addr,
            sender="--from",
        )
    return list_id


# A list's name and description are shown on every list page and in CLI output: bounded, and
# the name on one line.
NAME_MAX = 200
DESCRIPTION_MAX = 2_000


class ListTaken(Conflict, ValueError):
    """Another list already has that name (409, about `name`)."""


class UnknownListId(NotFound, LookupError):
    """No list with that id (404)."""


def clean_name(name: str) -> str:
    """A list name as stored: trimmed, not empty, one line, at most NAME_MAX characters."""
    text = name.strip()
    if not text:
        raise ListError("a list needs a name", field="name")
    if len(text) > NAME_MAX:
        raise ListError(f"a list name has at most {NAME_MAX} characters", field="name")
    if any(not ch.isprintable() for ch in text):
        raise ListError("a list name must be one line of printable text", field="name")
    return text


def clean_description(text: str) -> str:
    """A description as stored: trimmed, at most DESCRIPTION_MAX characters, no NUL."""
    kept = text.replace("\r\n", "\n").strip()
    if len(kept) > DESCRIPTION_MAX:
        raise ListError(
            f"a description has at most {DESCRIPTION_MAX:,} characters", field="description"
        )
    if "\x00" in kept:
        raise ListError("a description cannot hold a NUL character", field="description")
    return kept


def create(
    conn: psycopg.Connection[dict[str, Any]],
    name: str,
    description: str = "",
    *,
    double_opt_in: bool = False,
    from_addr: str | None = None,
) -> int:
    """A new list (ListTaken if the name is in use) with its description and options; its id."""
    text, about = clean_name(name), clean_description(description)
    _check_from(from_addr)
    try:
        with conn.transaction():
            row = conn.execute(
                QUERIES["create_list"], {"name": text, "description": about}
            ).fetchone()
            if row is None:
                raise ListTaken(f"there already is a list named {text!r}", field="name")
            list_id = int(row["id"])
            conn.execute(
                QUERIES["set_options"],
                {"double_opt_in": double_opt_in, "from_addr": from_addr, "list": list_id},
            )
    except psycopg.errors.CheckViolation as exc:
        raise _opt_in_error(text, "a From address") from exc
    return list_id


def change(
    conn: psycopg.Connection[dict[str, Any]],
    list_id: int,
    *,
    name: str | None = None,
    description: str | None = None,
    double_opt_in: bool | None = None,
    from_addr: str | None = None,
    sender: str = "a From address",
) -> None:
    """Rename, describe and set the options of list `list_id` in one transaction; None keeps
    a field, a description '' clears it. The one path every surface changes a list by.

    ListTaken if another list has the name; double opt-in needs a From address (`sender`
    says where it is given, in the refusal)."""
    text = None if name is None else clean_name(name)
    about = None if description is None else clean_description(description)
    _check_from(from_addr)
    shown = text
    try:
        with conn.transaction():
            try:
                row = conn.execute(
                    QUERIES["edit_list"], {"name": text, "description": about, "list": list_id}
                ).fetchone()
            except psycopg.errors.UniqueViolation as exc:
                raise ListTaken(f"there already is a list named {text!r}", field="name") from exc
            if row is None:
                raise UnknownListId(f"there is no list {list_id}")
            shown = str(row["name"])
            conn.execute(
                QUERIES["set_options"],
                {"double_opt_in": double_opt_in, "from_addr": from_addr, "list": list_id},
            )
    except psycopg.errors.CheckViolation as exc:
        raise _opt_in_error(shown or "", sender) from exc


@dataclass(frozen=True)
class ListFields:
    """One list's own fields, as its edit page shows them."""

    id: int
    name: str
    description: str
    double_opt_in: bool
    from_addr: str | None
    created_at: datetime


@dataclass(frozen=True)
class ListView:
    """A list with its options and its members counted by status, as every face shows it.
    A member whose address is suppressed is counted in `suppressed` only, never as confirmed
    or unconfirmed (issue 35)."""

    id: int
    name: str
    description: str
    double_opt_in: bool
    from_addr: str | None
    public: bool
    consent_text: str | None
    confirmed: int
    unconfirmed: int
    unsubscribed: int
    suppressed: int


def get_list(conn: psycopg.Connection[dict[str, Any]], list_id: int) -> ListFields:
    """One list's fields; UnknownListId if there is none."""
    row = conn.execute(QUERIES["list_by_id"], {"list": list_id}).fetchone()
    if row is None:
        raise UnknownListId(f"there is no list {list_id}")
    return ListFields(**row)


def all_lists(conn: psycopg.Connection[dict[str, Any]]) -> list[ListView]:
    """Every list with its options and member counts by status; members whose address is
    suppressed are counted apart (`suppressed`), in neither confirmed nor unconfirmed."""
    return [ListView(**row) for row in conn.execute(QUERIES["all_lists"])]


class ListInUse(Conflict, ValueError):
    """A campaign still to send names the list (409)."""


def delete(conn: psycopg.Connection[dict[str, Any]], list_id: int) -> str:
    """Delete list `list_id` and its memberships, in one transaction; what went, in a line.

    Refused (ListInUse, nothing changed) while a draft, scheduled, sending or paused campaign
    names it; sent and cancelled campaigns forget it and keep their counts and recipients.
    Subscribers stay. UnknownListId if there is no such list."""
    with conn.transaction():
        row = conn.execute(QUERIES["lock_list"], {"list": list_id}).fetchone()
        if row is None:
            raise UnknownListId(f"there is no list {list_id}")
        naming = conn.execute(QUERIES["campaigns_naming"], {"list": list_id}).fetchall()
        if naming:
            named = ", ".join(f"{c['id']} {c['name']!r} ({c['status']})" for c in naming)
            raise ListInUse(
                f"list {row['name']!r} is named by campaigns still to send: {named};"
                " take it off them, or cancel or delete them, first"
            )
        members = conn.execute(QUERIES["member_count"], {"list": list_id}).fetchone()
        past = conn.execute(QUERIES["unlink_campaigns"], {"list": list_id}).rowcount
        conn.execute(QUERIES["delete_list"], {"list": list_id})
    n = int(members["n"]) if members else 0
    said = f"list {row['name']!r} deleted with its {n} membership{'' if n == 1 else 's'}"
    return said + (f"; {past} past campaign(s) no longer name it" if past else "")
