"""The VERP return path: it names its job, and nothing forged names anyone (issue 21.1)."""

from __future__ import annotations

import pytest

from senddock.bounces.verp import ReturnPath, message_id_names

KEY = b"k" * 32
BIG = 2**63 - 1


def test_an_address_names_its_job_and_survives_a_relay_that_lowercases_it() -> None:
    path = ReturnPath.parse("bounces.example.org")
    address = path.address(KEY, 42, 7)
    assert address.startswith("b+42.7.") and address.endswith("@bounces.example.org")
    assert path.read(KEY, address) == (42, 7)
    assert path.read(KEY, address.upper()) == (42, 7)
    assert path.read(KEY, f"<{address}>") == (42, 7)
    assert len(path.address(KEY, BIG, BIG).split("@")[0]) <= 64


def test_an_address_setting_keeps_its_local_part() -> None:
    path = ReturnPath.parse("Bounce@Example.org")
    address = path.address(KEY, 1, 2)
    assert address.startswith("Bounce+1.2.") and address.endswith("@example.org")
    assert path.read(KEY, address) == (1, 2)


def test_a_forged_or_altered_address_names_nobody() -> None:
    path = ReturnPath.parse("bounces.example.org")
    good = path.address(KEY, 42, 7)
    local, domain = good.split("@")
    mac = local.rsplit(".", 1)[1]
    forged = [
        f"b+42.8.{mac}@{domain}",  # another subscriber with this job's MAC
        f"b+43.7.{mac}@{domain}",
        good.replace(mac, "0" * 20),
        f"{local}@other.example",
        f"x+42.7.{mac}@{domain}",
        path.address(b"another key" * 3, 42, 7),
        "b+42.7@bounces.example.org",
        "postmaster@bounces.example.org",
        "",
        "@@",
    ]
    for address in forged:
        assert path.read(KEY, address) is None, address


@pytest.mark.parametrize("bad", ["", "localhost", "a b.example", "@example.org", "x+y@ex.org"])
def test_a_bad_setting_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="bounce"):
        ReturnPath.parse(bad)


def test_our_message_id_names_broadcast_and_subscriber() -> None:
    assert message_id_names("<sd.42.7.Ab3x@news.example.org>") == (42, 7)
    assert message_id_names("<20261202.A27@relay.example>") is None
    assert message_id_names("") is None
