"""Addresses at reserved domains (issue 22, part 8): refused by default with the reason, at
import, `subscribers add` and the test send; accepted with SENDDOCK_ALLOW_RESERVED_DOMAINS
(the API's refusal: tests/test_campaign_edit_api.py, whose server runs without it)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from senddock.audience import addresses
from senddock.audience.addresses import InvalidAddress, normalize
from senddock.campaigns import trial
from senddock.config import Settings
from senddock.delivery import oneoff
from senddock.testing import Catcher
from support import Conn, new_campaign, seed_list, senddock, worker_env

NO_SMTP = "smtp://127.0.0.1:9?tls=none"


@pytest.fixture
def strict() -> Iterator[None]:
    """This process as a default install: reserved domains refused (conftest allows them)."""
    addresses.configure(False)
    yield
    addresses.configure(True)


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("zoë@bücher.test", ".test is a reserved domain (RFC 6761)"),
        ("drucker@büro.local", ".local is a reserved domain (RFC 6762"),
        ("ops@corp.INTERNAL", ".internal is a reserved domain (ICANN"),
        ("a@nowhere.invalid", ".invalid"),
        ("a@x.home.arpa", ".arpa"),
        ("a@hidden.onion", ".onion"),
    ],
)
def test_a_reserved_domain_is_refused_by_default_with_its_reason(
    strict: None, address: str, why: str
) -> None:
    """Fails without RESERVED in addresses.py (.internal is accepted; the others get
    email-validator's generic reason)."""
    with pytest.raises(InvalidAddress) as caught:
        normalize(address, field="to")
    assert why in caught.value.message and "SENDDOCK_ALLOW_RESERVED_DOMAINS" in caught.value.message
    assert caught.value.field == "to"


@pytest.mark.parametrize(
    ("address", "kept"),
    [
        ("zoë@Bücher.TEST", "zoë@bücher.test"),
        ("Drucker@büro.local", "Drucker@büro.local"),
        ("ops@corp.internal", "ops@corp.internal"),
        ("a@xn--bro-hoa.local", "a@büro.local"),
    ],
)
def test_a_reserved_domain_is_accepted_when_allowed(address: str, kept: str) -> None:
    """Fails without the stand-in in addresses._slow (email-validator refuses special-use
    names whatever it is told)."""
    assert normalize(address) == kept


def test_the_example_domains_stay_accepted(strict: None) -> None:
    """RFC 6761 section 6.5: applications should not treat example names as special."""
    assert normalize("zoë@bücher.example") == "zoë@bücher.example"
    assert normalize("ada@example.com") == "ada@example.com"


def test_an_import_refuses_reserved_rows_by_default_and_takes_them_when_allowed(
    db_url: str, conn: Conn, tmp_path: Path
) -> None:
    """Through the real CLI: each refused row says why, the rest is imported."""
    people = tmp_path / "people.csv"
    people.write_text(
        "email,name\nzoë@bücher.test,Zoë\nada@example.com,Ada\nops@corp.internal,Ops\n",
        encoding="utf-8",
    )
    strict_env = worker_env(db_url, NO_SMTP, SENDDOCK_ALLOW_RESERVED_DOMAINS="0")
    done = senddock(strict_env, "subscribers", "import", str(people), "--list", "news")
    assert done.returncode == 0, done.stderr
    assert "people.csv:2: rejected: invalid address 'zoë@bücher.test': .test is a reserved" in (
        done.stderr
    )
    assert "people.csv:4: rejected:" in done.stderr and ".internal is a reserved" in done.stderr
    emails = [r["email"] for r in conn.execute("SELECT email FROM subscribers ORDER BY id")]
    assert emails == ["ada@example.com"]
    refused = senddock(strict_env, "subscribers", "add", "drucker@büro.local")
    assert refused.returncode != 0 and len(refused.stderr.strip().splitlines()) == 1
    assert ".local is a reserved domain" in refused.stderr

    allowed = worker_env(db_url, NO_SMTP)  # conftest: SENDDOCK_ALLOW_RESERVED_DOMAINS=1
    done = senddock(allowed, "subscribers", "import", str(people), "--list", "news")
    assert done.returncode == 0 and "rejected" not in done.stderr.replace("rejected 0", "")
    emails = [r["email"] for r in conn.execute("SELECT email FROM subscribers ORDER BY email")]
    assert emails == ["ada@example.com", "ops@corp.internal", "zoë@bücher.test"]


def test_a_test_send_to_a_reserved_domain_is_refused_unless_allowed(
    conn: Conn, catcher: Catcher, strict: None
) -> None:
    seed_list(conn, "news", ["ada@example.com"])
    cid = new_campaign(conn, "news")
    settings = Settings(smtp_url=catcher.url)
    with pytest.raises(InvalidAddress):
        trial.build(conn, cid, ["qa@staging.internal"], settings)
    assert catcher.received() == []
    addresses.configure(True)
    oneoff.send(settings, trial.build(conn, cid, ["qa@staging.internal"], settings))
    assert [r.rcpt for r in catcher.received()] == ["qa@staging.internal"]
