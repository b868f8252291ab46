"""The test SMTP server: it records what it accepts and each fault behaves as documented.

Driven with stdlib smtplib from the test thread, so nothing here depends on our own client.
"""

from __future__ import annotations

import smtplib
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from senddock.testing import Catcher, Fault, convention_fault, message_id_of


def message(n: int | str = 1, to: str = "x@example.test") -> bytes:
    return (
        f"From: sender@example.test\r\nTo: {to}\r\nSubject: hello {n}\r\n"
        f"Message-ID: <m{n}@senddock.test>\r\n\r\nbody {n}\r\n"
    ).encode()


def connect(catcher: Catcher, timeout: float = 5.0) -> smtplib.SMTP:
    smtp = smtplib.SMTP("127.0.0.1", catcher.port, timeout=timeout)
    smtp.ehlo("client.test")
    return smtp


def send(catcher: Catcher, rcpt: str, n: int | str = 1) -> tuple[int, bytes]:
    """One transaction on a fresh connection; returns the DATA reply (raises on disconnect)."""
    smtp = connect(catcher)
    try:
        assert smtp.mail("sender@example.test")[0] == 250
        code, text = smtp.rcpt(rcpt)
        if code != 250:
            return code, text
        return smtp.data(message(n, rcpt))
    finally:
        smtp.close()


@pytest.fixture
def catcher() -> Iterator[Catcher]:
    with Catcher() as c:
        yield c


def test_records_each_recipient_with_envelope_and_message_id(catcher: Catcher) -> None:
    assert catcher.url == f"smtp://127.0.0.1:{catcher.port}?tls=none"
    assert catcher.port > 0
    smtp = connect(catcher)
    smtp.mail("Sender@Example.test")
    assert smtp.rcpt("A@example.test")[0] == 250
    assert smtp.rcpt("b@example.test")[0] == 250
    assert smtp.data(message(7))[0] == 250
    smtp.quit()

    got = catcher.received()
    assert [r.rcpt for r in got] == ["A@example.test", "b@example.test"]
    assert {r.mail_from for r in got} == {"Sender@Example.test"}
    assert {r.message_id for r in got} == {"<m7@senddock.test>"}
    assert b"body 7" in got[0].data
    assert got[0].at <= time.time()
    assert catcher.count_by_rcpt() == {"a@example.test": 1, "b@example.test": 1}
    assert catcher.delivered_once(["a@example.test", "B@example.test"])
    assert not catcher.delivered_once(["a@example.test"])
    assert catcher.duplicates() == {}
    assert catcher.connections == 1


def test_message_id_parsing() -> None:
    folded = b"Subject: x\r\nMessage-ID:\r\n <a@b>\r\n\r\nMessage-ID: <in-body@x>\r\n"
    assert message_id_of(folded) == "<a@b>"
    assert message_id_of(b"Subject: x\n\nbody\n") is None
    assert message_id_of(b"message-id: <c@d>\r\n") == "<c@d>"


def test_duplicates_and_clear(catcher: Catcher) -> None:
    for n in range(3):
        assert send(catcher, "twice@example.test", n)[0] == 250
    assert send(catcher, "once@example.test")[0] == 250
    assert catcher.duplicates() == {"twice@example.test": 3}
    assert not catcher.delivered_once()
    assert catcher.received_count() == 4
    catcher.clear()
    assert catcher.received() == []
    assert catcher.attempts_by_rcpt["twice@example.test"] == 3
    catcher.reset()
    assert catcher.attempts_by_rcpt == {}
    assert catcher.connections == 0


def test_bounce_is_550_at_rcpt_every_time_and_nothing_recorded(catcher: Catcher) -> None:
    for _ in range(3):
        code, text = send(catcher, "bounce-1@example.test")
        assert code == 550
        assert text == b"5.1.1 <bounce-1@example.test>: no such user"
    assert catcher.received() == []
    assert catcher.attempts_by_rcpt["bounce-1@example.test"] == 3


def test_flaky_is_451_twice_then_accepted(catcher: Catcher) -> None:
    codes = [send(catcher, "Flaky-7@example.test")[0] for _ in range(3)]
    assert codes == [451, 451, 250]
    assert catcher.count_by_rcpt() == {"flaky-7@example.test": 1}
    assert catcher.attempts_by_rcpt["flaky-7@example.test"] == 3


def test_flakydata_is_451_after_data_twice_then_accepted(catcher: Catcher) -> None:
    replies = [send(catcher, "flakydata-1@example.test") for _ in range(3)]
    assert replies[0] == (451, b"4.3.0 try again later")
    assert [code for code, _ in replies] == [451, 451, 250]
    assert catcher.count_by_rcpt() == {"flakydata-1@example.test": 1}


def test_data_fault_fails_the_whole_transaction(catcher: Catcher) -> None:
    smtp = connect(catcher)
    smtp.mail("sender@example.test")
    assert smtp.rcpt("ok@example.test")[0] == 250
    assert smtp.rcpt("flakydata-2@example.test")[0] == 250
    assert smtp.data(message())[0] == 451  # smtplib returns (not raises) the final reply
    smtp.quit()
    assert catcher.received() == []


def test_permanent_data_rejection_from_a_rule() -> None:
    spam = Fault.reject_data("554 5.7.1 message rejected as spam")
    with Catcher(lambda addr: spam if addr.startswith("spam") else None) as c:
        assert send(c, "spam@example.test") == (554, b"5.7.1 message rejected as spam")
        assert send(c, "spam@example.test")[0] == 554
        assert send(c, "bounce-1@example.test")[0] == 250  # the rule replaces the convention
        assert c.count_by_rcpt() == {"bounce-1@example.test": 1}


def test_drop_disconnects_mid_data_once_and_records_nothing(catcher: Catcher) -> None:
    with pytest.raises(smtplib.SMTPServerDisconnected):
        send(catcher, "drop-1@example.test")
    assert catcher.received() == []
    assert send(catcher, "drop-1@example.test")[0] == 250
    assert catcher.count_by_rcpt() == {"drop-1@example.test": 1}


def test_stall_then_accept() -> None:
    # A stall long enough that no busy machine takes that long to send one message unstalled:
    # the second send is told from a stalled one by a margin, not by how fast it is.
    stall = 2.0
    with Catcher(lambda _addr: Fault.stall(seconds=stall)) as c:
        started = time.monotonic()
        assert send(c, "slow@example.test")[0] == 250
        assert time.monotonic() - started >= stall
        assert c.count_by_rcpt() == {"slow@example.test": 1}
        started = time.monotonic()
        assert send(c, "slow@example.test")[0] == 250  # only the first attempt stalls
        assert time.monotonic() - started < stall


def test_stall_then_drop_records_nothing() -> None:
    with Catcher(lambda _addr: Fault.stall(seconds=0.1, then="drop")) as c:
        with pytest.raises(smtplib.SMTPServerDisconnected):
            send(c, "slow@example.test")
        assert c.received() == []


def test_stall_record_first_then_drop_is_a_lost_reply() -> None:
    lost = Fault.stall(seconds=0.0, then="drop", record_first=True)
    with Catcher(lambda _addr: lost) as c:
        with pytest.raises(smtplib.SMTPServerDisconnected):
            send(c, "dup@example.test", 1)
        assert send(c, "dup@example.test", 1)[0] == 250  # the sender's retry
        assert c.duplicates() == {"dup@example.test": 2}


def test_client_giving_up_during_a_stall_records_nothing() -> None:
    with Catcher(lambda _addr: Fault.stall(seconds=0.5)) as c:
        smtp = smtplib.SMTP("127.0.0.1", c.port, timeout=0.1)
        smtp.ehlo()
        smtp.mail("sender@example.test")
        smtp.rcpt("slow@example.test")
        with pytest.raises(smtplib.SMTPServerDisconnected, match="timed out"):
            smtp.data(message())
        smtp.close()
        time.sleep(0.7)
        assert c.received() == []


def test_address_conventions() -> None:
    assert convention_fault("bounce-3@x") == Fault.reject_rcpt()
    assert convention_fault("FLAKY-1@x") == Fault.defer_rcpt(attempts=2)
    assert convention_fault("flakydata-1@x") == Fault.defer_data(attempts=2)
    assert convention_fault("drop-1@x") == Fault.disconnect(attempts=1)
    assert convention_fault("stall-1@x") == Fault.stall(seconds=5.0, attempts=1)
    assert convention_fault("someone@bounce-.example") is None


def test_fault_validation() -> None:
    with pytest.raises(ValueError):
        Fault.defer_rcpt(reply="550 5.1.1 nope")
    with pytest.raises(ValueError):
        Fault.reject_data("451 4.0.0 not permanent")
    with pytest.raises(ValueError):
        Fault.disconnect(attempts=0)


def test_reject_mail_from_gives_553(catcher: Catcher) -> None:
    catcher.reject_mail_from = "553 5.7.1 sender not allowed"
    smtp = connect(catcher)
    assert smtp.mail("sender@example.test") == (553, b"5.7.1 sender not allowed")
    catcher.reject_mail_from = None
    assert smtp.mail("sender@example.test")[0] == 250
    smtp.quit()


def test_reject_connect_at_greeting(catcher: Catcher) -> None:
    catcher.reject_connect = True
    with pytest.raises(smtplib.SMTPConnectError) as err:
        smtplib.SMTP("127.0.0.1", catcher.port, timeout=5)
    assert err.value.smtp_code == 554
    catcher.reject_connect = "421 4.3.2 busy"
    with pytest.raises(smtplib.SMTPConnectError) as err:
        smtplib.SMTP("127.0.0.1", catcher.port, timeout=5)
    assert err.value.smtp_code == 421
    catcher.reject_connect = False
    assert send(catcher, "ok@example.test")[0] == 250
    assert catcher.connections == 3


def test_set_down_refuses_then_listens_again_on_the_same_port(catcher: Catcher) -> None:
    port = catcher.port
    idle = connect(catcher)
    catcher.set_down(True)
    assert catcher.is_down
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2)
    with pytest.raises(smtplib.SMTPServerDisconnected):
        idle.noop()  # open sessions were dropped too
    catcher.set_down(False)
    assert not catcher.is_down
    assert catcher.port == port
    assert send(catcher, "back@example.test")[0] == 250


def test_set_down_can_keep_open_sessions(catcher: Catcher) -> None:
    smtp = connect(catcher)
    catcher.set_down(True, drop_sessions=False)
    assert smtp.noop()[0] == 250
    smtp.quit()
    catcher.set_down(False)


def test_auth_plain_and_login_with_credentials() -> None:
    with Catcher(user="u@x", password="p:w") as c:
        assert c.url == f"smtp://u%40x:p%3Aw@127.0.0.1:{c.port}?tls=none"
        for mechanism in ("PLAIN", "LOGIN"):
            smtp = connect(c)
            assert "auth" in smtp.esmtp_features
            assert smtp.mail("sender@example.test")[0] == 530  # AUTH first
            smtp.user, smtp.password = "u@x", "p:w"
            auth = smtp.auth_plain if mechanism == "PLAIN" else smtp.auth_login
            assert smtp.auth(mechanism, auth)[0] == 235
            assert smtp.mail("sender@example.test")[0] == 250
            assert smtp.rcpt("ok@example.test")[0] == 250
            assert smtp.data(message())[0] == 250
            smtp.quit()
        assert c.received_count() == 2

        smtp = connect(c)
        with pytest.raises(smtplib.SMTPAuthenticationError) as err:
            smtp.login("u@x", "wrong")
        assert err.value.smtp_code == 535
        smtp.close()


def test_reject_auth_gives_535_even_with_good_credentials() -> None:
    with Catcher(user="u", password="p") as c:
        c.reject_auth = True
        smtp = connect(c)
        with pytest.raises(smtplib.SMTPAuthenticationError) as err:
            smtp.login("u", "p")
        assert err.value.smtp_code == 535
        assert err.value.smtp_error == b"5.7.8 Authentication credentials invalid"
        smtp.close()


def test_no_auth_offered_without_credentials(catcher: Catcher) -> None:
    smtp = connect(catcher)
    assert "auth" not in smtp.esmtp_features
    smtp.quit()


def test_many_concurrent_sessions(catcher: Catcher) -> None:
    sessions, per_session = 12, 150

    def worker(w: int) -> None:
        smtp = connect(catcher, timeout=30)
        for i in range(per_session):
            n = f"{w}-{i}"
            smtp.sendmail(
                "sender@example.test", [f"r{n}@example.test", f"c{n}@example.test"], message(n)
            )
        smtp.quit()

    with ThreadPoolExecutor(sessions) as pool:
        list(pool.map(worker, range(sessions)))
    total = sessions * per_session * 2
    assert catcher.wait_for(total, timeout=5)
    assert catcher.received_count() == total
    assert catcher.delivered_once()
    assert catcher.connections == sessions
    assert len({r.message_id for r in catcher.received()}) == sessions * per_session


def test_wait_for_wakes_up_or_times_out(catcher: Catcher) -> None:
    assert not catcher.wait_for(1, timeout=0.05)
    sender = threading.Timer(0.1, lambda: send(catcher, "late@example.test"))
    sender.start()
    assert catcher.wait_for(1, timeout=5)
    sender.join()


def test_restart_after_stop_and_stop_is_idempotent() -> None:
    c = Catcher()
    c.start()
    assert send(c, "a@example.test")[0] == 250
    c.stop()
    c.stop()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", c.port), timeout=2)
    with c:
        assert send(c, "b@example.test")[0] == 250
    assert c.received_count() == 2
