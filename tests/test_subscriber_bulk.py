"""Issue 39 item 5: the subscribers page acts on several people at once and shows chosen
attribute columns. Against a real `senddock serve` and Postgres: each action on the ticked ones
or on everyone the filter matches, with the rules the one-person pages keep (a list someone
left stays left, history keeps its row, a double opt-in list is refused), the count the page
showed guarding an action on the whole filter, and odd data shown as text."""

from __future__ import annotations

import re

import httpx

from senddock.audience.lists import configure
from support import Conn, seed_list
from test_browser_day_one import server  # noqa: F401
from test_web_headers import signed_in
from web_support import Server

ODD = "zoë@bücher.example"


def _ids(conn: Conn, *emails: str) -> list[int]:
    rows = conn.execute(
        "SELECT id FROM subscribers WHERE email = ANY(%s) ORDER BY id", (list(emails),)
    ).fetchall()
    return [int(r["id"]) for r in rows]


def _on(conn: Conn, list_name: str) -> dict[str, str]:
    rows = conn.execute(
        "SELECT s.email, m.status FROM list_memberships m JOIN subscribers s"
        " ON s.id = m.subscriber_id JOIN lists l ON l.id = m.list_id WHERE l.name = %s",
        (list_name,),
    ).fetchall()
    return {str(r["email"]): str(r["status"]) for r in rows}


def _csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found
    return found.group(1)


def test_actions_on_the_ticked_and_on_the_whole_filter_keep_each_persons_rules(
    server: Server,  # noqa: F811
    conn: Conn,
) -> None:
    berlin = [f"b{i}@example.org" for i in range(4)] + [ODD]
    others = [f"o{i}@example.org" for i in range(3)]
    seed_list(conn, "news", berlin + others)
    conn.execute(
        "UPDATE subscribers SET attributes = jsonb_build_object('city', 'Berlin',"
        " 'plan', '<b>pro</b>') WHERE email = ANY(%s)",
        (berlin,),
    )
    seed_list(conn, "vip", ["b0@example.org"])
    conn.execute(  # b0 left vip: a bulk add must not put them back
        "UPDATE list_memberships SET status = 'unsubscribed' WHERE subscriber_id = %s",
        (_ids(conn, "b0@example.org")[0],),
    )
    configure(conn, "double", double_opt_in=True, from_addr="news@example.org")
    where = {"q": "", "list": "", "filter": 'attributes.city = "Berlin"', "cols": "plan,city"}
    with signed_in(server.url) as c:
        page = c.get("/subscribers", params=where).text
        csrf = _csrf(page)
        # The chosen columns, the values as text (no markup from a subscriber's data).
        assert '<th scope="col" data-column="plan">plan</th>' in page
        assert "&lt;b&gt;pro&lt;/b&gt;" in page and "<b>pro</b>" not in page
        assert "all 5 matching" in page

        def act(**form: object) -> str:
            done = c.post("/subscribers/bulk", data={"csrf": csrf, **where, **form})
            assert done.status_code == 303, done.text
            return c.get(done.headers["location"]).text

        # Everyone matching, onto vip: four join, b0's "left" stays left.
        shown = act(action="join", target_list="vip", scope="all", seen=5)
        assert "4 subscribers added to vip. Not changed: 1 left it before (not put back)." in shown
        assert _on(conn, "vip") == {
            "b0@example.org": "unsubscribed",
            **{e: "confirmed" for e in berlin[1:]},
        }
        # The count the page showed guards the whole-filter action: one more matches now.
        conn.execute(
            'UPDATE subscribers SET attributes = \'{"city": "Berlin"}\''
            " WHERE email = 'o0@example.org'"
        )
        stale = act(action="suppress", scope="all", seen=5)
        assert "now matches 6 subscribers, not the 5 shown: nothing was done" in stale
        assert conn.execute("SELECT count(*) AS n FROM suppressions").fetchone() == {"n": 0}
        # The ticked ones (one outside the filter is ignored): suppressed.
        ids = _ids(conn, "b1@example.org", ODD, "o1@example.org")
        act(action="suppress", scope="selected", ids=ids, seen=6)
        rows = conn.execute("SELECT email, reason FROM suppressions ORDER BY email").fetchall()
        assert [(r["email"], r["reason"]) for r in rows] == [
            ("b1@example.org", "manual"),
            (ODD, "manual"),
        ]
        # A double opt-in list is joined only by each person's own confirmation.
        refused = act(action="join", target_list="double", scope="all", seen=6)
        assert "double opt-in" in refused and _on(conn, "double") == {}
        # Off a list; then delete: a subscriber with no history is gone.
        act(action="leave", target_list="vip", scope="selected", ids=_ids(conn, "b2@example.org"))
        assert "b2@example.org" not in _on(conn, "vip")
        act(action="delete", scope="selected", ids=_ids(conn, "b3@example.org"))
        assert _ids(conn, "b3@example.org") == []
        # Forged, or with no list chosen: nothing happens.
        forged = c.post(
            "/subscribers/bulk", data={"csrf": "x", "action": "delete", "scope": "all", "seen": 6}
        )
        assert forged.status_code == 403
        nothing = act(action="join", scope="selected", ids=_ids(conn, "o2@example.org"))
        assert "Choose the list" in nothing
    with httpx.Client(base_url=server.url) as anon:
        r = anon.post("/subscribers/bulk", data={"action": "delete"}, follow_redirects=False)
        assert r.status_code in (302, 303, 403)
    assert _ids(conn, "o2@example.org")  # never deleted
