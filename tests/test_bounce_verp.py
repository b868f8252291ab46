"""The VERP return path: it names its job, and nothing forged names anyone (issue 21.1)."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from senddock.bounces.verp import ReturnPath
from senddock.messages.message_id import key_pads, names, token

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


def test_our_message_id_names_its_job_only_with_that_job_s_token() -> None:
    mine = f"<sd.42.7.{token(KEY, 42, 7)}@news.example.org>"
    assert names(KEY, mine) == (42, 7)
    assert names(KEY, mine.upper().replace("<SD.", "<sd.")) == (42, 7)  # a relay's case
    forged = [
        mine.replace(".7.", ".8."),  # another subscriber, the same token
        mine.replace(".42.", ".042."),
        f"<sd.42.7.{token(b'another key', 42, 7)}@news.example.org>",
        f"<sd.42.7.{token(KEY, 42, 7)[:31]}@news.example.org>",
        "<sd.42.7.1a2b3c4d@news.example.org>",  # before migration 0028: one token a broadcast
        "<20261202.A27@relay.example>",
        "",
    ]
    for message_id in forged:
        assert names(KEY, message_id) is None, message_id


def test_the_padded_keys_make_hmac_sha256() -> None:
    for key in (KEY, b"k", b"x" * 64, b"y" * 100):
        ikey, okey = key_pads(key)
        inner = hashlib.sha256(ikey + b"42.7").digest()
        want = hmac.new(key, b"42.7", hashlib.sha256).digest()
        assert hashlib.sha256(okey + inner).digest() == want
