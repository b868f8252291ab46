"""Campaigns you can change (issue 22, part 1), through the real command line: edit a draft,
clone any campaign, delete a draft, archive a finished one. Whatever a broadcast has sent or is
sending stays as it went: an edit that would change it is one line and a non-zero exit."""

from __future__ import annotations

import threading
from email import message_from_bytes, policy
from email.message import EmailMessage
from pathlib import Path

import pytest

from senddock import queue
from senddock.audience import segments
from senddock.campaigns import CampaignError, broadcast, create_campaign, edits, layouts, schedule
from senddock.campaigns.broadcast import enqueue_all
from senddock.errors import SendDockError
from senddock.testing import Catcher
from support import Conn, ThreadWorker, seed_list, senddock, unfinished, wait_until, worker_env
from test_layouts import empty_layouts
from test_segments import seed

NO_SMTP = "smtp://127.0.0.1:9?tls=none"
ZOE = "zoë@bücher.example"
ZOE_SENT = "zoë@xn--bcher-kva.example"  # the domain goes to the relay as its A-label


def cli(db_url: str, *args: str) -> tuple[int, str, str]:
    proc = senddock(worker_env(db_url, NO_SMTP), *args)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, proc.stdout.strip(), proc.stderr.strip()


def refused(db_url: str, *args: str) -> str:
    """Run a command that must fail: its one stderr line."""
    code, _, err = cli(db_url, *args)
    assert code != 0
    assert len(err.splitlines()) == 1, err
    return err


def draft(conn: Conn, name: str = "Jüne news") -> int:
    seed_list(conn, "news", [ZOE, "ada@example.com"])
    return create_campaign(
        conn,
        name=name,
        list_name="news",
        subject="Old {{ subscriber.name }}",
        from_addr="Nëws <news@example.org>",
        text_body="Old text\n",
    )


def fields(conn: Conn, campaign_id: int) -> dict[str, object]:
    row = conn.execute(
        "SELECT name, subject, from_addr, reply_to, text_body, html_body, status,"
        " array(SELECT l.name FROM campaign_lists cl JOIN lists l ON l.id = cl.list_id"
        "       WHERE cl.campaign_id = c.id ORDER BY l.name) AS lists"
        " FROM campaigns c WHERE id = %s",
        (campaign_id,),
    ).fetchone()
    assert row is not None
    return dict(row)


def send_all(db_url: str, conn: Conn, catcher: Catcher, campaign_id: int, n: int) -> int:
    bid, _, _ = broadcast(conn, campaign_id)
    enqueue_all(conn, bid)
    with ThreadWorker(db_url, catcher.url):
        assert catcher.wait_for(n, timeout=60)
        assert wait_until(lambda: unfinished(conn, bid) == 0)
    return bid


def received(catcher: Catcher) -> dict[str, EmailMessage]:
    """The messages the SMTP server got, by recipient."""
    out: dict[str, EmailMessage] = {}
    for m in catcher.received():
        msg = message_from_bytes(m.data, policy=policy.default)
        assert isinstance(msg, EmailMessage)
        out[m.rcpt] = msg
    return out


def test_an_edited_draft_sends_its_new_fields_to_its_new_lists(
    db_url: str, conn: Conn, catcher: Catcher, tmp_path: Path
) -> None:
    """Every field from the CLI: what the SMTP server receives is the edit. Fails without
    `campaign edit` (no such command)."""
    cid = draft(conn)
    seed_list(conn, "vip", ["björk@insel.example"])
    html = tmp_path / "b.html"
    html.write_text("<p>Neu, {{ subscriber.name }}!</p>", encoding="utf-8")
    code, out, err = cli(
        db_url,
        *("campaign", "edit", str(cid), "--name", "Juli", "--subject", "Neu {{ subscriber.name }}"),
        *("--from", "Öffice <office@example.org>", "--reply-to", "redaktion@example.org"),
        *("--html-file", str(html), "--no-text", "--list", "news", "--list", "vip"),
    )
    assert code == 0, err
    assert (
        out == f"campaign {cid}: changed name, subject, From, Reply-To, text body, HTML body, lists"
    )
    send_all(db_url, conn, catcher, cid, 3)
    got = received(catcher)
    assert set(got) == {ZOE_SENT, "ada@example.com", "björk@insel.example"}
    msg = got["ada@example.com"]
    assert msg["Subject"] == "Neu Name 2"
    assert "office@example.org" in str(msg["From"]) and "Öffice" in str(msg["From"])
    assert str(msg["Reply-To"]) == "redaktion@example.org"
    html_part = msg.get_body(("html",))
    assert html_part is not None and "Neu, Name 2!" in str(html_part.get_content())
    assert "Old" not in msg.as_string()


def test_an_edit_is_checked_like_create_and_changes_nothing_when_refused(
    db_url: str, conn: Conn
) -> None:
    """One line from the CLI; the other refusals in-process (each a SendDockError naming its
    field, as create's)."""
    cid = draft(conn)
    before = fields(conn, cid)
    err = refused(db_url, "campaign", "edit", str(cid), "--subject", "Hi {{ subscriber.nmae }}")
    assert "subject template" in err and "subscriber.nmae is undefined" in err
    for changes, field, words in [
        (edits.Changes(subject="Hi {{ oops "), "subject", "subject template"),
        (edits.Changes(lists=["nosuchlist"]), "lists", "nosuchlist"),
        (edits.Changes(text_body=""), "text_body", "text body"),  # no body at all
        (edits.Changes(reply_to="a\r\nBcc: x@example.org"), "reply_to", "CR or LF"),
        (edits.Changes(name=" "), "name", "name cannot be empty"),
    ]:
        with pytest.raises(SendDockError) as caught:
            edits.edit(conn, cid, changes)
        assert caught.value.field == field and words in caught.value.message, caught.value
        assert caught.value.status in (404, 422), caught.value  # bad input, as at create
    assert fields(conn, cid) == before


def test_a_sent_campaign_keeps_what_it_sent_and_only_its_name_changes(
    db_url: str, conn: Conn, catcher: Catcher
) -> None:
    """409 with the reason for every field that went out; the name (nobody sees it) changes.
    Fails without the status check in edits._refuse (the edit goes through)."""
    cid = draft(conn)
    send_all(db_url, conn, catcher, cid, 2)
    err = refused(db_url, "campaign", "edit", str(cid), "--subject", "Changed")
    assert f"campaign {cid}" in err and "it is sent" in err and "clone" in err
    refused(db_url, "campaign", "edit", str(cid), "--list", "news", "--list", "other")
    assert fields(conn, cid)["subject"] == "Old {{ subscriber.name }}"
    assert cli(db_url, "campaign", "edit", str(cid), "--name", "Jüne (sent)")[1].endswith(
        "changed name"
    )
    assert fields(conn, cid)["name"] == "Jüne (sent)"


def test_a_sending_campaign_is_refused_with_409(conn: Conn) -> None:
    cid = draft(conn)
    broadcast(conn, cid)
    with pytest.raises(CampaignError) as caught:
        edits.edit(conn, cid, edits.Changes(text_body="New text\n"))
    assert caught.value.status == 409 and caught.value.field == "text_body"
    assert "it is sending" in caught.value.message


def test_a_scheduled_draft_is_refused_until_unscheduled(db_url: str, conn: Conn) -> None:
    cid = draft(conn)
    schedule(conn, cid, conn.execute("SELECT now() + interval '1 day' AS t").fetchone()["t"])  # type: ignore[index]
    err = refused(db_url, "campaign", "edit", str(cid), "--subject", "Later")
    assert "scheduled" in err and f"campaign schedule {cid} --clear" in err
    schedule(conn, cid, None)
    assert edits.edit(conn, cid, edits.Changes(subject="Later")) == ["subject"]
    assert fields(conn, cid)["subject"] == "Later"


def test_an_edit_racing_a_send_waits_and_is_then_refused(conn: Conn, db_url: str) -> None:
    """The edit takes the campaign's row lock: a send holding it finishes first, and the edit
    judges the status it left. Fails (the edit lands on a sending campaign) without the lock."""
    cid = draft(conn)
    from senddock.db import connect

    other = connect(db_url)
    outcome: list[object] = []
    try:
        with other.transaction():
            assert queue.lock_campaign(other, cid) is not None
            broadcast(other, cid)

            def try_edit() -> None:
                with connect(db_url) as c:
                    try:
                        outcome.append(edits.edit(c, cid, edits.Changes(subject="Sneaky")))
                    except CampaignError as exc:
                        outcome.append(exc)

            t = threading.Thread(target=try_edit)
            t.start()
            t.join(0.5)
            assert t.is_alive()  # waiting for the send's lock
        t.join(10)
    finally:
        other.close()
    assert len(outcome) == 1 and isinstance(outcome[0], CampaignError)
    assert fields(conn, cid)["subject"] == "Old {{ subscriber.name }}"


def test_a_sent_campaign_clones_into_a_draft_that_sends_again(
    db_url: str, conn: Conn, catcher: Catcher
) -> None:
    cid = draft(conn)
    send_all(db_url, conn, catcher, cid, 2)
    code, out, err = cli(db_url, "campaign", "clone", str(cid))
    assert code == 0, err
    new = int(out)
    copy = fields(conn, new)
    assert copy["status"] == "draft" and copy["name"] == "Jüne news (copy)"
    assert {k: v for k, v in copy.items() if k not in ("name", "status")} == {
        k: v for k, v in fields(conn, cid).items() if k not in ("name", "status")
    }
    assert cli(db_url, "campaign", "edit", out, "--subject", "Again {{ subscriber.name }}")[0] == 0
    catcher.clear()
    send_all(db_url, conn, catcher, new, 2)
    assert received(catcher)[ZOE_SENT]["Subject"] == "Again Name 1"
    assert int(cli(db_url, "campaign", "clone", out, "--name", "Düplo")[1]) > new


def test_only_a_draft_is_deleted(db_url: str, conn: Conn, catcher: Catcher) -> None:
    cid = draft(conn)
    sent = create_campaign(
        conn, name="s", list_name="news", subject="s", from_addr="n@example.org", text_body="x"
    )
    send_all(db_url, conn, catcher, sent, 2)
    err = refused(db_url, "campaign", "delete", str(sent))
    assert "only a draft" in err and "archive" in err
    assert fields(conn, sent)["status"] == "sent"
    assert cli(db_url, "campaign", "delete", str(cid))[1] == f"campaign {cid} deleted"
    assert conn.execute("SELECT 1 FROM campaigns WHERE id = %s", (cid,)).fetchone() is None
    assert "no campaign" in refused(db_url, "campaign", "delete", str(cid))


def test_an_archived_campaign_leaves_the_default_list(
    db_url: str, conn: Conn, catcher: Catcher
) -> None:
    cid = draft(conn)
    assert "only a sent or cancelled" in refused(db_url, "campaign", "archive", str(cid))
    send_all(db_url, conn, catcher, cid, 2)
    assert cli(db_url, "campaign", "archive", str(cid))[1] == f"campaign {cid} archived"

    def listed(*flag: str) -> list[str]:
        return [
            line.split()[0] for line in cli(db_url, "campaign", "list", *flag)[1].splitlines()[1:]
        ]

    assert str(cid) not in listed()
    assert listed("--archived") == [str(cid)]
    edits.archive(conn, cid, archived=False)  # `archive --undo`
    assert str(cid) in listed()


def test_a_draft_edit_changes_its_markdown_layout_segment_and_filter(
    db_url: str, conn: Conn, catcher: Catcher, tmp_path: Path
) -> None:
    """From the CLI: the Markdown body, the layout and the segment of a draft change, and
    the broadcast sends what the edit says to whom it says; the filter's '' widens again.
    Fails without edits.Changes' markdown_body, layout and segment (no such option)."""
    empty_layouts(db_url)
    try:
        seed(conn)
        segments.add(conn, "londoners", 'attributes.city = "London"')
        cid = create_campaign(
            conn,
            name="Juni",
            list_name="news",
            subject="Hi {{ subscriber.name }}",
            from_addr="news@example.org",
            text_body="Plain old text\n",
            audience_filter='attributes.plan = "pro"',
        )
        layouts.add_layout(
            conn, "Rahmen", "<header>KOPF</header>{{ content }}<footer>FUSS</footer>"
        )
        md = tmp_path / "b.md"
        md.write_text("# Grüße, {{ subscriber.name }}\n\n*neu*\n", encoding="utf-8")
        code, out, err = cli(
            db_url,
            *("campaign", "edit", str(cid), "--markdown-file", str(md), "--no-text"),
            *("--layout", "Rahmen", "--segment", "londoners"),
        )
        assert code == 0, err
        assert out == (f"campaign {cid}: changed text body, Markdown body, layout, segment, filter")
        row = conn.execute(
            "SELECT text_body, html_body, markdown_body, layout_id, segment_id, audience_filter"
            " FROM campaigns WHERE id = %s",
            (cid,),
        ).fetchone()
        assert row is not None and row["audience_filter"] is None and row["html_body"] is None
        assert row["text_body"] and "Grüße" in row["text_body"]  # derived once, here
        code, shown, err = cli(db_url, "campaign", "show", str(cid))
        assert code == 0, err
        assert "  layout     Rahmen\n" in shown and "  segment    londoners\n" in shown
        assert "  filter     -" in shown and "  html body  -" in shown
        # A filter that would be SQL is a parse error; nothing changes.
        err = refused(db_url, "campaign", "edit", str(cid), "--filter", "1=1; DROP TABLE x")
        assert err.startswith("senddock: error: segment: unexpected character ';'"), err
        send_all(db_url, conn, catcher, cid, 3)
        got = received(catcher)
        londoners = {"ada@example.org", "bob@example.org", "eve@example.org"}
        assert set(got) == londoners
        msg = got["ada@example.org"]
        html_part = msg.get_body(("html",))
        assert html_part is not None
        html = str(html_part.get_content())
        assert "KOPF" in html and "FUSS" in html and "<h1>Grüße, ada</h1>" in html
        assert "Plain old text" not in msg.as_string()

        # A clone keeps all four; its edit clears the segment: every subscriber of the list.
        copy = edits.clone(conn, cid)
        assert edits.edit(conn, copy, edits.Changes(segment="")) == ["segment"]
        row = conn.execute(
            "SELECT segment_id, layout_id, markdown_body FROM campaigns WHERE id = %s", (copy,)
        ).fetchone()
        assert row is not None and row["segment_id"] is None and row["layout_id"] is not None
        assert edits.edit(conn, copy, edits.Changes(layout="none")) == ["layout"]
        # The sent one keeps its layout: 409.
        with pytest.raises(CampaignError) as caught:
            edits.edit(conn, cid, edits.Changes(layout="none"))
        assert caught.value.status == 409 and caught.value.field == "layout"
    finally:
        empty_layouts(db_url)
