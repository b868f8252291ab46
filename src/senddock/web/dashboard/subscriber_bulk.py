"""The subscribers page's actions on several people at once (issue 39, item 5): add to a list,
take off a list, suppress, delete; on the ones ticked, or on everyone the filter matches.

Each person goes through the same function the one-person pages use (audience.subscribers,
audience.suppressions), in a transaction of their own, so the rules hold as they do there: a
membership someone left stays left, a subscriber with delivery history keeps their row for it,
a double opt-in list is joined only by a person's own confirmation (refused here: each would
need a confirmation request). Bounded: MAX at a time; a larger filter is refused whole with
its count, never cut silently. An action on the whole filter carries the count the page
showed: if the filter matches another number now, nothing is done and the page says so.
"""

from __future__ import annotations

from collections import Counter
from typing import Annotated, Literal
from urllib.parse import urlencode

from fastapi import APIRouter, Form
from starlette.requests import Request
from starlette.responses import Response

from senddock.audience import subscribers, suppressions
from senddock.audience.lists import all_lists
from senddock.audience.segment_filter import MAX_LENGTH, SegmentError
from senddock.errors import Invalid, SendDockError
from senddock.web import queries
from senddock.web.dashboard.gate import LoggedIn
from senddock.web.dashboard.views import Conn, db, flash, redirect
from senddock.web.queries import like
from senddock.words import plural

router = APIRouter(include_in_schema=False, route_class=LoggedIn)

MAX = 1_000
Action = Literal["join", "leave", "suppress", "delete"]
DONE = {"join": "added to", "leave": "taken off", "suppress": "suppressed", "delete": "deleted"}


def back(q: str, list_name: str, filter_text: str, cols: str) -> str:
    """The subscribers page as it was (its search, list, filter and columns)."""
    query = urlencode({"q": q, "list": list_name, "filter": filter_text, "cols": cols})
    return f"/subscribers?{query}"


def _targets(
    conn: Conn,
    scope: str,
    ids: list[int],
    where: tuple[str, str, str],
    seen: int,
) -> list[tuple[int, str]]:
    """The (id, address) the action is for: the ticked ones still matching the page's filter,
    or everyone it matches (as many as the page said, else Invalid)."""
    q, list_name, filter_text = where
    pattern, on, text = like(q), list_name or None, filter_text or None
    if scope == "selected":
        if not ids:
            raise Invalid("Tick the subscribers to act on, or choose everyone matching.")
        return queries.subscriber_addresses(conn, pattern, on, text, ids[:MAX], MAX)
    found = matching(conn, where)
    if len(found) > MAX:
        raise Invalid(
            f"The filter matches more than {MAX:,} subscribers, the most done at once."
            " Narrow it (a list, or a filter), or use the CLI or the API."
        )
    if len(found) != seen:
        raise Invalid(
            f"The filter now matches {plural(len(found), 'subscriber')}, not the {seen} shown:"
            " nothing was done. Look again."
        )
    return found


def matching(conn: Conn, where: tuple[str, str, str]) -> list[tuple[int, str]]:
    """Everyone the page's search, list and filter match, up to MAX + 1 (more than MAX: too
    many to act on at once). A bad filter: SegmentError."""
    q, list_name, filter_text = where
    return queries.subscriber_addresses(
        conn, like(q), list_name or None, filter_text or None, None, MAX + 1
    )


def _act(conn: Conn, action: Action, email: str, list_name: str) -> str:
    """One person; what became of them ("done", or why not)."""
    if action == "join":
        standing = queries.membership_status(conn, email, list_name)
        if standing == "unsubscribed":
            return "left it before (not put back)"
        if standing is not None:
            return "on it already"
        subscribers.update(conn, email, lists=(list_name,))
        return "done"
    if action == "leave":
        try:
            subscribers.remove(conn, email, list_name)
        except subscribers.SubscriberError:
            return "not on it"
        return "done"
    if action == "suppress":
        added = suppressions.add(conn, email, "manual", "dashboard: several at once")
        return "done" if added else "suppressed already"
    said = subscribers.remove(conn, email)
    return "kept for their history, on no list" if "kept" in said else "done"


@router.post("/subscribers/bulk")
def bulk(
    request: Request,
    action: Annotated[Action, Form()],
    scope: Annotated[Literal["selected", "all"], Form()] = "selected",
    ids: Annotated[list[int], Form()] = [],  # noqa: B006 (FastAPI copies a default)
    target_list: Annotated[str, Form(max_length=200)] = "",
    seen: Annotated[int, Form()] = -1,
    q: Annotated[str, Form(max_length=500)] = "",
    list_name: Annotated[str, Form(alias="list", max_length=200)] = "",
    filter_text: Annotated[str, Form(alias="filter", max_length=MAX_LENGTH)] = "",
    cols: Annotated[str, Form(max_length=500)] = "",
) -> Response:
    page = back(q, list_name, filter_text, cols)
    with db(request) as conn:
        try:
            if action in ("join", "leave"):
                chosen = {row.name: row for row in all_lists(conn)}.get(target_list.strip())
                if chosen is None:
                    raise Invalid("Choose the list to add them to or take them off.")
                if action == "join" and chosen.double_opt_in:
                    raise Invalid(
                        f"{chosen.name} is a double opt-in list: each person joins it by their"
                        " own confirmation. Add them one by one (each is asked), or import"
                        " with their consent."
                    )
            targets = _targets(conn, scope, ids, (q, list_name, filter_text), seen)
            outcomes: Counter[str] = Counter()
            for _, email in targets:
                try:
                    outcomes[_act(conn, action, email, target_list.strip())] += 1
                except SendDockError as exc:
                    outcomes[exc.message] += 1
        except SegmentError as exc:
            flash(request, exc.message, "error")
            return redirect(page)
        except SendDockError as exc:
            flash(request, exc.message, "error")
            return redirect(page)
    done = outcomes.pop("done", 0)
    where = f" {target_list.strip()}" if action in ("join", "leave") else ""
    said = f"{plural(done, 'subscriber')} {DONE[action]}{where}."
    others = "; ".join(f"{n} {why}" for why, n in sorted(outcomes.items()))
    flash(request, said + (f" Not changed: {others}." if others else ""))
    return redirect(page)
