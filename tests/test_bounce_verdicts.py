"""Why a recipient failed: a reason for every finding, its kind from one table (issue 34).

A later bounce removes a person from the list for good, so the verdict must be right and, in
doubt, must not suppress. The messages are hand-written in tests/bounces/verdicts/, one or more
per reason, each modelled on what a common MTA or provider sends (see its README); the rules
are also tested one reply at a time, and on Sisimai's corpus when it is beside the repository.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import get_args

import pytest

from senddock.bounces.classify import KIND, Reason, judge
from senddock.bounces.finding import Finding
from senddock.bounces.parse import MAX_FINDINGS, parse

VERDICTS = Path(__file__).parent / "bounces" / "verdicts"
CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "bounces"

# file: [(recipient, reason)], in the order the message names them.
EXPECTED: dict[str, list[tuple[str | None, Reason]]] = {
    # The address or its domain does not take mail: hard, suppressed.
    "userunknown-exim": [("ana@dest.example", "userunknown")],
    "userunknown-exchange-online": [("ben@contoso.example", "userunknown")],
    "userunknown-sendmail-transcript": [("cleo@dest.example", "userunknown")],
    "userunknown-ses-by-mail": [("dora@dest.example", "userunknown")],
    "userunknown-forwarded-report": [("lou@dest.example", "userunknown")],
    "hostunknown-postfix": [("eve@nowhere.example", "hostunknown")],
    "hasmoved-sendmail": [("finn@dest.example", "hasmoved")],
    "notaccept-rfc7504": [("gil@parked.example", "notaccept")],
    # About the mailbox, not for good: soft, counted.
    "mailboxfull-gmail": [("hana@gmail.example", "mailboxfull")],
    "suspend-gmail": [("ivan@gmail.example", "suspend")],
    "expired-postfix": [("jon@slow.example", "expired")],
    "systemfull-exchange": [("kai@dest.example", "systemfull")],
    "networkerror-postfix": [("lea@dark.example", "networkerror")],
    "mailererror-postfix": [("max@letters.example", "mailererror")],
    "systemerror-exchange": [("nia@dest.example", "systemerror")],
    "undefined-bare-reply": [("oto@dest.example", "undefined")],
    "undefined-temporary-user-unknown": [("mia@dest.example", "undefined")],
    # About us or our message: policy, nobody suppressed.
    "blocked-exim-rbl": [("pia@dest.example", "blocked")],
    "spamdetected-gmail": [("quin@gmail.example", "spamdetected")],
    "virusdetected-amavis": [("rosa@dest.example", "virusdetected")],
    "policyviolation-generic": [("sam@dest.example", "policyviolation")],
    "rejected-sender-domain": [("tara@dest.example", "rejected")],
    "norelaying-postfix": [("uma@elsewhere.example", "norelaying")],
    "securityerror-starttls": [("vic@dest.example", "securityerror")],
    "authfailure-yahoo": [("wes@yahoo.example", "authfailure")],
    "requireptr-outlook": [("xia@outlook.example", "requireptr")],
    "badreputation-gmail": [("yan@gmail.example", "badreputation")],
    "toomanyconn-postfix": [("zed@dest.example", "toomanyconn")],
    "speeding-yahoo": [("abe@yahoo.example", "speeding")],
    "exceedlimit-too-many-recipients": [("gia@dest.example", "exceedlimit")],
    "mesgtoobig-postfix": [("bea@dest.example", "mesgtoobig")],
    "contenterror-mime": [("cal@dest.example", "contenterror")],
    "notcompliantrfc-gmail": [("dee@gmail.example", "notcompliantrfc")],
    "syntaxerror-old-host": [("eli@dest.example", "syntaxerror")],
    "filtered-recipient": [("fay@dest.example", "filtered")],
    # Complaints, in RFC 5965's format and in the providers' own.
    "feedback-opt-out": [("gus@isp.example", "feedback")],
    "feedback-microsoft-jmrp": [("hal@outlook.example", "feedback")],
    "feedback-apple-unsubscribe": [("ida@icloud.example", "feedback")],
    # Two recipients with no blank line between their fields (as AOL sends them).
    "two-recipients-run-together": [
        ("jan@dest.example", "mailboxfull"),
        ("kim@dest.example", "userunknown"),
    ],
}


def test_every_reason_has_one_kind_and_the_fixtures_cover_every_finding_reason() -> None:
    assert set(KIND) == set(get_args(Reason))
    covered = {reason for found in EXPECTED.values() for _, reason in found}
    # vacation and delivered are never findings: an auto-reply or a success notice is none.
    assert covered == set(get_args(Reason)) - {"vacation", "delivered"}
    assert {p.stem for p in VERDICTS.glob("*.eml")} == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_hand_written_bounce_reads_as_its_reason(name: str) -> None:
    report = parse((VERDICTS / f"{name}.eml").read_bytes())
    got = [(f.recipient, f.reason) for f in report.findings]
    assert got == EXPECTED[name], report
    for finding in report.findings:
        assert finding.reason is not None and finding.kind == KIND[finding.reason]


def test_the_command_prints_the_reason_beside_the_kind() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "senddock", "bounces", "parse", str(VERDICTS / "suspend-gmail.eml")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    [record] = [json.loads(line) for line in done.stdout.splitlines()]
    assert (record["recipient"], record["kind"], record["reason"]) == (
        "ivan@gmail.example",
        "soft",
        "suspend",
    )


@pytest.mark.parametrize(
    ("status", "reply", "diagnostic", "reason"),
    [
        # RFC 3463's subject and detail, when the words say nothing more.
        ("5.1.1", "550", "", "userunknown"),
        ("5.1.2", "550", "", "hostunknown"),
        ("5.1.6", "551", "", "hasmoved"),
        ("5.2.1", "550", "", "suspend"),
        ("5.2.2", "552", "", "mailboxfull"),
        ("5.3.4", "552", "", "mesgtoobig"),
        ("5.4.7", None, "", "expired"),
        ("5.7.25", "550", "", "requireptr"),
        ("5.7.26", "550", "", "authfailure"),
        ("5.0.0", "550", "", "undefined"),
        # The words name it more precisely than the code.
        ("5.7.1", "554", "554 5.7.1 Client host rejected: cannot find your hostname", "requireptr"),
        ("5.7.1", "550", "550 5.7.1 Relaying denied", "norelaying"),
        ("5.0.0", "550", "550 Host or domain name not found", "hostunknown"),
        # "5.2.1 User unknown" (Sendmail, PowerMTA): both about the mailbox; the words say gone.
        ("5.2.1", "550", "550 5.2.1 <a@b.example>... User Unknown", "userunknown"),
        # A code the reporting MTA inferred, not the remote's: the remote's words decide.
        ("5.7.1", "553", "553 Invalid recipient a@b.example", "userunknown"),
        # A hard reading contradicted by the other one is not hard.
        ("5.7.1", "550", "user unknown", "policyviolation"),
        ("5.1.1", "550", "550 5.1.1 blocked using zen.spamhaus.example", "blocked"),
        (
            "5.1.1",
            "550",
            "550 5.1.1 <a@b.example> has sent to too many recipients this hour",
            "speeding",
        ),
        ("4.4.7", None, "connect to mx.b.example: Connection timed out", "expired"),
        # Temporary is never hard, whatever the words.
        (
            "4.1.1",
            "450",
            "450 4.1.1 <a@b.example>: Recipient address rejected: User unknown",
            "undefined",
        ),
        (None, "450", "450 mailbox unavailable", "undefined"),
        # A DNS lookup that did not answer says nothing about the domain.
        (
            None,
            None,
            "Name service error for domain b.example: Host not found, try again",
            "networkerror",
        ),
        # Refused before our recipient was named (connect, HELO, MAIL FROM): about us.
        (
            "5.1.1",
            "553",
            "SMTP error from remote mail server after MAIL FROM:<us@a.example>:"
            " 553 5.1.1 unknown user",
            "rejected",
        ),
        ("5.0.0", "501", "Connected but my name was rejected. 501 Invalid domain name", "rejected"),
        # Exchange Online's directory-based edge blocking names a recipient it does not know.
        (
            "5.4.1",
            "550",
            "550 5.4.1 Recipient address rejected: Access denied. AS(201806281)",
            "userunknown",
        ),
        # RFC 7505's null MX and RFC 7504's 521/556.
        ("5.1.10", "556", "556 5.1.10 Domain b.example does not accept mail (nullMX)", "notaccept"),
        # Non-English replies of common Japanese MTAs.
        (
            None,
            None,
            "ユーザー Neko (a@b.example) は Domino ディレクトリには見つかりません",
            "userunknown",
        ),
        # Nothing at all: not proof of a dead address.
        (None, None, None, "undefined"),
    ],
)
def test_the_reason_of_one_reply(
    status: str | None, reply: str | None, diagnostic: str | None, reason: str
) -> None:
    verdict = judge(status, reply, diagnostic)
    assert (verdict.reason, verdict.kind) == (reason, KIND[verdict.reason])


def test_a_finding_whose_source_gave_only_its_kind_gets_a_reason_of_that_kind() -> None:
    # A provider's "hard" with the words of a full mailbox: the provider decides the kind.
    assert Finding("a@b.example", "hard", None, None, "mailbox full").reason == "userunknown"
    assert Finding("a@b.example", "hard", "5.1.2", None, None).reason == "hostunknown"
    assert Finding("a@b.example", "complaint", None, None, "SES complaint").reason == "feedback"
    assert Finding("a@b.example", "policy", None, None, "blocked by RBL").reason == "blocked"
    with pytest.raises(ValueError, match="userunknown finding is hard"):
        Finding("a@b.example", "soft", None, None, None, None, "userunknown")


@pytest.mark.parametrize(
    "raw",
    [
        # Addresses with words of failure beside them, in a message that is no bounce.
        b"From: ann@a.example\r\nTo: bob@b.example\r\nSubject: hi\r\n\r\n"
        b"I wrote to carl@c.example but the user unknown reply was a joke.\r\n",
        # A bounce whose only addresses are ours and the returned message's Message-ID.
        b"From: MAILER-DAEMON@m.example\r\nTo: b+1.2.k@bounces.example\r\n"
        b"Subject: Undelivered\r\n\r\nUser unknown\r\nMessage-ID: <b1.s2.k@letters.example>\r\n"
        b"From: news@letters.example\r\n",
    ],
)
def test_addresses_in_text_that_is_no_bounce_or_ours_suppress_nobody(raw: bytes) -> None:
    report = parse(raw)
    assert all(f.kind not in ("hard", "complaint") for f in report.findings), report


def test_an_address_the_words_name_as_the_sender_is_no_recipient() -> None:
    raw = (
        b"From: Mail Delivery Subsystem <MAILER-DAEMON@aol.example>\r\nTo: b@bounces.example\r\n"
        b"Subject: Returned mail\r\n\r\nYour mail to the following recipients could not be "
        b"delivered because\r\nthey are not accepting mail from news@lists.example:\r\n"
        b"    screenname\r\n"
    )
    assert [f.recipient for f in parse(raw).findings if f.kind == "hard"] == []


def test_an_x400_address_is_read_without_its_prefix() -> None:
    raw = (
        b"From: postmaster@exchange.example\r\nTo: b@bounces.example\r\n"
        b"Subject: Undeliverable: news\r\n\r\nYour message did not reach some or all of the "
        b"intended recipients.\r\n\r\n  c=US;a= ;p=ORG;dda:SMTP=ann@example.org; on Fri\r\n"
        b"  The recipient name is not recognized\r\n"
    )
    got = [(f.recipient, f.reason) for f in parse(raw).findings]
    assert got == [("ann@example.org", "userunknown")]


def test_a_hostile_bounce_costs_bounded_work_and_names_at_most_max_findings() -> None:
    head = b"From: MAILER-DAEMON@m.example\r\nTo: b@bounces.example\r\nSubject: Undelivered\r\n\r\n"
    many = b"".join(b"<u%d@d%d.example>: 550 5.1.1 user unknown\r\n" % (i, i) for i in range(5000))
    assert len(parse(head + many).findings) == MAX_FINDINGS
    # A 4 MB line after an address and its reason: only the start of a line is read (CPU
    # time, not wall time, so a busy machine does not fail it: about 9 s when every pattern
    # read the whole line, 1.2 s now, most of it flufl.bounce's).
    started = time.process_time()
    report = parse(head + b"a@b.example user unknown " + b"y " * 2_000_000 + b"\r\n")
    assert time.process_time() - started < 4
    assert [(f.recipient, f.reason) for f in report.findings] == [("a@b.example", "userunknown")]


def test_sisimais_corpus_meets_the_targets() -> None:
    """Sisimai's public corpus with its verdicts, when it is beside the repository (the
    hand-written fixtures above are the tests that always run)."""
    grade = CORPUS / "grade.py"
    if not grade.exists():
        pytest.skip(f"no corpus at {CORPUS}")
    senddock = Path(sys.executable).with_name("senddock")
    done = subprocess.run(
        [sys.executable, str(grade), "--senddock", str(senddock), "--show", "0"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    figures = {
        line.rsplit(" ", 2)[0].strip(): float(line.split()[-2])
        for line in done.stdout.splitlines()[:3]
    }
    assert figures["hard recall"] >= 0.95, done.stdout
    assert figures["complaint recall"] >= 0.95, done.stdout
    assert figures["false suppression"] <= 0.02, done.stdout
