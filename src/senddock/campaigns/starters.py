"""Starter layouts: responsive layouts to begin from, written in MJML (issue 39, item 2).

A fresh install has no layout, and writing email HTML that survives Outlook, Gmail and a phone
is a craft of its own. So SendDock ships a few layouts written in MJML, the markup made for
that craft, and compiles one when a person picks it (`senddock layout add NAME --starter KEY`,
or *Use this layout* on the dashboard's layouts page). The compiler is mjml-python, a Rust port
of MJML from PyPI: no Node at run time. The result is stored as an ordinary layout (HTML with
`{{ content }}`), checked like any other (campaigns/layouts.py), and edited from there.

What each starter is written to give a mail client:
- tables with role="presentation" and Outlook's conditional comments, which MJML writes;
- styles inline on each element (MJML puts them there), since some clients drop <style>;
- a single column up to 600 px that narrows on a phone;
- a dark mode: `color-scheme` meta tags and a `prefers-color-scheme: dark` block, for the
  clients that honour them (Apple Mail, Outlook for Mac, iOS);
- a footer with the signed unsubscribe link, and the preferences link when one is offered.

tests/test_starter_layouts.py checks each of these on the compiled HTML, and sends a campaign
in each through the SMTP catcher.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources

from mjml import mjml2html

from senddock.campaigns import layouts
from senddock.errors import NotFound


@dataclass(frozen=True)
class Starter:
    key: str  # what --starter takes, and the file's name (starters/KEY.mjml)
    title: str  # the layout's name when none is given
    description: str


STARTERS = (
    Starter(
        "newsletter",
        "Newsletter",
        "A title line, the body on a white card over a light grey page, and a small footer.",
    ),
    Starter(
        "announcement",
        "Announcement",
        "A coloured header band with a kicker and a headline above the body: for launches and"
        " news.",
    ),
    Starter(
        "letter",
        "Letter",
        "Plain and personal: serif text on white, no header, a rule above the footer.",
    ),
)
# The text part of each: the body, then the unsubscribe link on a line of its own (a text
# derived from the compiled HTML would carry its header and layout words too).
TEXT = (
    "{{ content }}\n\n--\nUnsubscribe: {{ unsubscribe_url }}\n"
    "{% if preferences_url %}Your preferences: {{ preferences_url }}\n{% endif %}"
)


class UnknownStarter(NotFound, LookupError):
    """No starter layout by that key (404)."""


def find(key: str) -> Starter:
    for s in STARTERS:
        if s.key == key.strip().lower():
            return s
    known = ", ".join(s.key for s in STARTERS)
    raise UnknownStarter(f"no starter layout {key!r}; there are: {known}", field="starter")


def source(key: str) -> str:
    """The starter's MJML source."""
    name = f"{find(key).key}.mjml"
    return resources.files(__package__).joinpath("starters", name).read_text(encoding="utf-8")


@functools.cache
def html(key: str) -> str:
    """The starter compiled to HTML, with `{{ content }}` where the body goes."""
    return str(mjml2html(source(key)))


def add(conn: layouts.Conn, key: str, name: str | None = None, *, default: bool = False) -> int:
    """Store the starter `key` as a layout (named `name`, else its title); its id."""
    starter = find(key)
    return layouts.add_layout(
        conn, (name or starter.title).strip(), html(starter.key), TEXT, default=default
    )
