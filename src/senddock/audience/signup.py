"""Public sign-up: a list marked public takes new members from a form anyone may post
(web/signup.py answers POST /subscribe), under the list's own opt-in rule.

The form names its list by a signed token (`form_token`), so nobody can post to a list that
was never published, or walk list ids. What a sign-up does depends on the address, but what
its caller is told never does (see web/signup.py):

  new address                  a subscriber, and a membership: unconfirmed (double opt-in,
                               a confirmation request is mailed) or confirmed (single)
  member still unconfirmed     the request is mailed again
  left a double opt-in list    unconfirmed again, a request mailed: only the link re-joins
  left a single opt-in list    nothing: a stranger's form must not put them back
  already confirmed            nothing
  suppressed                   nothing written, nothing mailed

Every membership a sign-up opens gets a consent row (signup_consents: time, IP, User-Agent,
list); following the link confirms the membership and stamps that row in one transaction.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any

import psycopg

from senddock.audience import optin
from senddock.audience.lists import ListView, find_list
from senddock.db import sql
from senddock.errors import Invalid
from senddock.messages import check_header, sign, verify

Conn = psycopg.Connection[dict[str, Any]]

QUERIES = sql.load(__package__, "signup.sql")

SIGNUP = "signup"  # the purpose a form's list token is signed for
# What a sign-up form says a person agrees to, unless the list words it itself (0032).
DEFAULT_CONSENT = (
    "I agree to receive {list} by email. I can leave at any time by the link in every message."
)
CONSENT_MAX = 2000
HONEYPOT = "website"  # a field people never see: a bot that fills it is answered, not served
NAME_MAX = 200


@dataclass(frozen=True)
class PublicList:
    """A list that takes sign-ups, as a sign-up needs it."""

    id: int
    name: str
    double_opt_in: bool
    consent: str  # the words its form shows, kept with each sign-up


def form_token(key: bytes, list_id: int) -> str:
    """The token a list's form carries: its id, signed."""
    return sign(key, SIGNUP, list_id)


def public_list(conn: Conn, key: bytes, token: str) -> PublicList | None:
    """The public list a form token names; None when the token does not check or the list
    is not (or no longer) public."""
    ids = verify(key, SIGNUP, token.strip())
    if ids is None or len(ids) != 1:
        return None
    row = conn.execute(QUERIES["public_list"], {"list": ids[0]}).fetchone()
    if row is None:
        return None
    wording = consent_wording(str(row["name"]), row["consent_text"])
    return PublicList(int(row["id"]), str(row["name"]), bool(row["double_opt_in"]), wording)


def consent_wording(list_name: str, consent_text: str | None) -> str:
    """The words a list's form shows and each sign-up keeps: its own, or the default."""
    return consent_text or DEFAULT_CONSENT.format(list=list_name)


def set_consent_text(conn: Conn, list_id: int, text: str) -> None:
    """Word a list's sign-up consent; '' restores the default wording. One paragraph, at most
    CONSENT_MAX characters, no control character."""
    words = " ".join(text.split())
    if len(words) > CONSENT_MAX:
        raise Invalid(
            f"the consent text is longer than {CONSENT_MAX} characters", field="consent_text"
        )
    if any(ord(c) < 32 or ord(c) == 127 for c in words):
        raise Invalid("the consent text holds a control character", field="consent_text")
    conn.execute(QUERIES["set_consent_text"], {"text": words or None, "list": list_id})


def set_public(conn: Conn, list_id: int, public: bool | None) -> None:
    """Open (True) or close (False) a list's sign-up form; None leaves it."""
    conn.execute(QUERIES["set_public"], {"public": public, "list": list_id})


def find(conn: Conn, name_or_id: str) -> int:
    """A list by its exact name, else by its numeric id; UnknownList if neither."""
    try:
        return find_list(conn, name_or_id)
    except LookupError:
        if not name_or_id.strip().isdigit():
            raise
    row = conn.execute(QUERIES["public_list_any"], {"list": int(name_or_id)}).fetchone()
    if row is None:
        return find_list(conn, name_or_id)  # raises, naming what was asked for
    return int(row["id"])


def list_form(key: bytes, public_url: str, lst: ListView) -> str:
    """A list's copy-paste sign-up form with its own wording, as `lists form` prints it and
    the Lists page shows it."""
    wording = consent_wording(lst.name, lst.consent_text)
    return form_html(public_url, form_token(key, lst.id), lst.name, wording)


def form_html(public_url: str, token: str, list_name: str, consent: str) -> str:
    """The copy-paste HTML form of a list: posts to this server's /subscribe, and hides the
    honeypot field off-screen (not `display:none`, which some bots skip). The address field
    is text, not `type=email`: browsers refuse a non-ASCII local part there (zoë@...), which
    the server accepts; the server is the one that checks it."""
    action = html.escape(public_url.rstrip("/") + "/subscribe", quote=True)
    title = html.escape(list_name)
    return (
        f'<form method="post" action="{action}" accept-charset="utf-8">\n'
        f'  <input type="hidden" name="list" value="{html.escape(token, quote=True)}">\n'
        '  <label>Email <input type="text" inputmode="email" autocomplete="email" name="email"'
        ' required maxlength="254"></label>\n'
        f'  <label>Name <input type="text" name="name" maxlength="{NAME_MAX}"></label>\n'
        f'  <div aria-hidden="true" style="position:absolute;left:-10000px">\n'
        f'    <input type="text" name="{HONEYPOT}" tabindex="-1" autocomplete="off">\n'
        "  </div>\n"
        f"  <p>{html.escape(consent)}</p>\n"
        f'  <button type="submit">Subscribe to {title}</button>\n'
        "</form>\n"
    )


def check_name(name: str) -> str:
    """A sign-up's name: one line, at most NAME_MAX characters."""
    name = " ".join(check_header("name", name, field="name").split())
    if len(name) > NAME_MAX:
        raise Invalid(f"the name is longer than {NAME_MAX} characters", field="name")
    return name


def sign_up(
    conn: Conn, lst: PublicList, address: str, name: str, ip: str, user_agent: str
) -> list[optin.Awaiting]:
    """Apply one sign-up (see the module's table), in one transaction; the confirmation
    request rows to mail (optin.requests), none or one. `address` is already normalized."""
    with conn.transaction():
        found = conn.execute(QUERIES["suppressed"], {"email": address}).fetchone()
        if found is not None and found["suppressed"]:
            return []
        row = conn.execute(QUERIES["subscriber"], {"email": address, "name": name}).fetchone()
        assert row is not None
        sid = int(row["id"])
        opened = conn.execute(
            QUERIES["open_membership"],
            {"list": lst.id, "subscriber": sid, "double_opt_in": lst.double_opt_in},
        ).fetchone()
        if opened is None:
            return []
        conn.execute(
            QUERIES["record_consent"],
            {
                "subscriber": sid,
                "list": lst.id,
                "ip": ip,
                "user_agent": user_agent[:500],
                "double_opt_in": lst.double_opt_in,
                "consent_text": lst.consent,
            },
        )
        if opened["status"] != "unconfirmed":
            return []
        rows = conn.execute(QUERIES["request_row"], {"subscriber": sid, "list": lst.id})
        return [optin.Awaiting(**r) for r in rows.fetchall()]


def confirm(conn: Conn, subscriber_id: int, list_id: int) -> bool:
    """Confirm a membership by its link, stamping its consent row in the same transaction;
    False if it was not waiting for confirmation."""
    with conn.transaction():
        done = optin.confirm(conn, subscriber_id, list_id)
        if done:
            conn.execute(QUERIES["confirm_consent"], {"subscriber": subscriber_id, "list": list_id})
    return done
