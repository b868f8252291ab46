"""Erasure on request (GDPR article 17, audience/erasure.py): after `erase`, no column of any
table holds the person's address, name or attributes, their consent and preference records are
gone, the campaign counts are the same, and nothing more is sent to them.

The rows are made by the real paths: a public sign-up, a preference change, a broadcast sent by
a real worker to a real SMTP server that refuses them at RCPT (the reply quotes the address), a
returned message about them stored raw, and a second broadcast, paused, holding their job.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from psycopg import sql as pgsql

from senddock import campaigns, queue
from senddock.audience import erasure, import_csv, preferences, signup, subscribers
from senddock.audience.addresses import normalize
from senddock.audience.lists import ensure_list
from senddock.queue.counts import count
from senddock.testing import Catcher, Fault
from support import Conn, ThreadWorker, jobs, send_campaign, unfinished, wait_until
from test_bounce_effects import back, report

ADA = "Ada.Erase@Example.com"
NAME = "Ada Quillfeather"
CITY = "Zürichberg-7731"
IP, AGENT = "203.0.113.77", "Mozilla/5.0 (Erasure test agent 4242)"
BOB = "bob@example.com"


def cells_holding(conn: Conn, needle: str) -> list[str]:
    """Every `table.column` of the schema holding `needle` (case ignored) in some row: every
    text, varchar, json, jsonb, array and bytea column of every table (bytea read as escaped
    text, so any bytes can be searched)."""
    columns = conn.execute(
        "SELECT c.table_name, c.column_name, c.data_type FROM information_schema.columns c"
        " JOIN information_schema.tables t USING (table_schema, table_name)"
        " WHERE c.table_schema = current_schema() AND t.table_type = 'BASE TABLE'"
        " AND c.data_type IN ('text', 'character varying', 'json', 'jsonb', 'ARRAY', 'bytea')"
    ).fetchall()
    found = []
    for c in columns:
        column = pgsql.Identifier(c["column_name"])
        if c["data_type"] == "bytea":  # bytes and needle alike as escaped text (\ooo)
            text = pgsql.SQL("encode({}, 'escape')").format(column)
            sought = pgsql.SQL("encode(convert_to(%s, 'UTF8'), 'escape')")
        else:
            text, sought = pgsql.SQL("{}::text").format(column), pgsql.SQL("%s")
        query = pgsql.SQL("SELECT count(*) AS n FROM {} WHERE strpos(lower({}), lower({})) > 0")
        row = conn.execute(
            query.format(pgsql.Identifier(c["table_name"]), text, sought), (needle,)
        ).fetchone()
        if row and row["n"]:
            found.append(f"{c['table_name']}.{c['column_name']}")
    return sorted(found)


def refused_at_rcpt(address: str) -> Fault | None:
    """The relay refuses Ada at RCPT, quoting her address (550 5.1.1 <addr>: no such user)."""
    return Fault.reject_rcpt() if address.lower() == ADA.lower() else None


def ada_everywhere(conn: Conn, db_url: str) -> tuple[int, int, int, int]:
    """Ada in every kind of row; (her id, the sent broadcast, the paused campaign holding her
    job, its broadcast)."""
    news = ensure_list(conn, "news")
    signup.set_public(conn, news, True)
    signup.sign_up(
        conn,
        signup.PublicList(news, "news", False, signup.DEFAULT_CONSENT),
        normalize(ADA),
        NAME,
        IP,
        AGENT,
    )
    subscribers.update(conn, ADA, attributes={"city": CITY}, lists=("offers",))
    sid = subscribers.show(conn, ADA).id
    assert preferences.change(conn, sid, "leave", ensure_list(conn, "offers"), None)

    # A second campaign, paused before anything is sent: Ada's job in it waits, pending.
    waiting, later = send_campaign(conn, "news", [BOB], name="later")
    campaigns.pause(conn, waiting)
    with Catcher(refused_at_rcpt) as catcher:
        _, sent = send_campaign(conn, "news", [BOB], name="first")
        with ThreadWorker(db_url, catcher.url):
            assert wait_until(lambda: unfinished(conn, sent) == 0)
    ada_job = jobs(conn, sent)[normalize(ADA).lower()]
    assert (ada_job["status"], ada_job["failure"]) == ("failed", "bounced")
    assert normalize(ADA).lower() in str(ada_job["last_reply"]).lower()
    # A DSN about her, kept raw, and a finding matched to her job.
    assert back(conn, report("postfix-unknown-user", normalize(ADA), ada_job["message_id"]))
    assert jobs(conn, later)[normalize(ADA).lower()]["status"] == "pending"
    return sid, sent, waiting, later


def test_erase_leaves_no_trace_and_the_counts_stay(conn: Conn, db_url: str) -> None:
    sid, sent, waiting, later = ada_everywhere(conn, db_url)
    # Her address is everywhere the brief names before (the search finds what it must find).
    assert {
        "broadcast_jobs.email",
        "broadcast_jobs.last_reply",
        "bounce_findings.recipient",
        "bounce_messages.raw",
        "subscribers.email",
        "suppressions.email",
    } <= set(cells_holding(conn, ADA))
    assert cells_holding(conn, CITY) == ["subscribers.attributes"]
    counts_before = count(conn, sent)
    rows_before = conn.execute(
        "SELECT id, status, failure, message_id, bounce_kind FROM broadcast_jobs"
        " WHERE broadcast_id = %s ORDER BY id",
        (sent,),
    ).fetchall()

    done = erasure.erase(conn, ADA)

    assert (done.subscriber_id, done.kept_row, done.jobs, done.cancelled) == (sid, True, 2, 1)
    assert (done.consents, done.events, done.suppression) == (1, 1, "bounce")
    assert done.findings == 1 and done.messages == 1 and not done.kept_suppressed
    for needle in (ADA, normalize(ADA), NAME, CITY, IP, AGENT):
        assert cells_holding(conn, needle) == [], needle
    for table in ("signup_consents", "subscription_events", "list_memberships"):
        left = conn.execute(
            pgsql.SQL("SELECT count(*) AS n FROM {} WHERE subscriber_id = %s").format(
                pgsql.Identifier(table)
            ),
            (sid,),
        ).fetchone()
        assert left == {"n": 0}, table
    row = conn.execute("SELECT email, status FROM subscribers WHERE id = %s", (sid,)).fetchone()
    assert row == {"email": f"erased-{sid}@erased.invalid", "status": "erased"}
    # The sent broadcast: the same counts, the same jobs in the same states.
    assert count(conn, sent) == counts_before
    assert (
        conn.execute(
            "SELECT id, status, failure, message_id, bounce_kind FROM broadcast_jobs"
            " WHERE broadcast_id = %s ORDER BY id",
            (sent,),
        ).fetchall()
        == rows_before
    )
    # The paused one: her job is cancelled; resumed, it sends Bob's alone and ends.
    assert jobs(conn, later)[f"erased-{sid}@erased.invalid"]["status"] == "cancelled"
    campaigns.resume(conn, waiting)
    with Catcher() as catcher:
        with ThreadWorker(db_url, catcher.url):
            assert wait_until(lambda: _ended(conn, later))
        assert catcher.count_by_rcpt() == {BOB: 1}
    after = count(conn, later)
    assert (after.total, after.sent, after.cancelled) == (2, 1, 1)


def _ended(conn: Conn, broadcast_id: int) -> bool:
    row = conn.execute("SELECT status FROM broadcasts WHERE id = %s", (broadcast_id,)).fetchone()
    return row is not None and row["status"] == "finished"


def test_erase_keeping_the_suppression_keeps_a_digest_and_never_mails_them_again(
    conn: Conn, db_url: str, tmp_path: Path
) -> None:
    ada = normalize(ADA)
    subscribers.add(conn, ADA, NAME, {"city": CITY}, ("news",))
    done = erasure.erase(conn, ADA, keep_suppressed=True)
    assert (done.kept_row, done.kept_suppressed, done.suppression) == (False, True, None)
    for needle in (ADA, NAME, CITY):
        assert cells_holding(conn, needle) == [], needle
    [kept] = conn.execute("SELECT digest, reason FROM erased_suppressions").fetchall()
    assert kept["reason"] == "erased on request (asked)"

    # Imported again by someone, then a broadcast: everyone on the list but her.
    subscribers.add(conn, ADA.upper(), "", None, ("news",))
    again = conn.execute("SELECT email, reason FROM suppressions").fetchall()
    assert again == [{"email": normalize(ADA.upper()), "reason": "manual"}]
    _, bid = send_campaign(conn, "news", [BOB])
    assert set(jobs(conn, bid)) == {BOB}
    # Or by an import.
    subscribers.remove(conn, ada)
    conn.execute("DELETE FROM suppressions")
    (tmp_path / "people.csv").write_text(f"email\n{ada}\n")
    assert import_csv(conn, tmp_path / "people.csv", "news").imported == 1
    assert conn.execute("SELECT reason FROM suppressions").fetchall() == [{"reason": "manual"}]
    # Nor does the public form put her back.
    news = ensure_list(conn, "news")
    signup.set_public(conn, news, True)
    subscribers.remove(conn, ada)
    assert (
        signup.sign_up(
            conn, signup.PublicList(news, "news", True, signup.DEFAULT_CONSENT), ada, "", IP, AGENT
        )
        == []
    )
    assert conn.execute(
        "SELECT count(*) AS n FROM subscribers WHERE lower(email) = lower(%s)", (ada,)
    ).fetchone() == {"n": 0}


def test_erase_without_asking_lifts_the_suppression(conn: Conn) -> None:
    subscribers.add(conn, ADA, NAME, None, ("news",))
    conn.execute("INSERT INTO suppressions (email, reason) VALUES (%s, 'complaint')", (ADA,))
    done = erasure.erase(conn, ADA)
    assert (done.suppression, done.kept_suppressed) == ("complaint", False)
    assert conn.execute("SELECT count(*) AS n FROM erased_suppressions").fetchone() == {"n": 0}
    assert cells_holding(conn, ADA) == []


def test_erase_waits_for_a_message_in_flight(conn: Conn) -> None:
    _, bid = send_campaign(conn, "news", [ADA, BOB])
    owner = conn.execute(
        "INSERT INTO workers (host, boot_id, pid, pid_started, concurrency)"
        " VALUES ('h', 'b', 1, 's', 1) RETURNING id"
    ).fetchone()
    assert owner is not None
    claimed = conn.execute(queue.claim_sql(10), {"owner": owner["id"]}).fetchall()
    assert len(claimed) == 2
    with pytest.raises(erasure.InFlight) as refused:
        erasure.erase(conn, ADA)
    assert refused.value.status == 409
    # Nothing changed: her job is still the worker's, with her address, and she is still there.
    job = jobs(conn, bid)[normalize(ADA).lower()]
    assert (job["status"], job["owner"]) == ("sending", owner["id"])
    assert "subscribers.email" in cells_holding(conn, ADA)


def test_erase_an_idna_address_with_a_hostile_kept_message(conn: Conn) -> None:
    zoe = "zoë@bücher.example"
    subscribers.add(conn, zoe, "Zoë", {"note": "=cmd|' /C calc'!A0"}, ("news",))
    _, bid = send_campaign(conn, "news", [BOB])  # her job waits, pending
    raw = (
        b"From: mailer@elsewhere.example\r\nSubject: Auto: away\r\n\r\n"
        + "Away; write to zoë@bücher.example instead.".encode()
        + b" \xff\xfe\x00 not UTF-8\r\n"
    )
    kept = back(conn, raw)
    assert kept.findings == 0 and cells_holding(conn, zoe) == sorted(
        ["bounce_messages.raw", "broadcast_jobs.email", "subscribers.email"]
    )
    done = erasure.erase(conn, zoe.upper())
    assert (done.cancelled, done.messages) == (1, 1)
    for needle in (zoe, "Zoë", "calc"):
        assert cells_holding(conn, needle) == [], needle
    assert count(conn, bid).cancelled == 1
