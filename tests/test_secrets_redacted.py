"""A password in SENDDOCK_SMTP_URL or SENDDOCK_DATABASE_URL is never printed (issue 35.7):
not in a bad-configuration error, not in a database error that quotes the URL, not in the
log lines and tracebacks `-v` prints. The real command is run with each bad URL."""

from __future__ import annotations

import pytest

from senddock.redaction import hide_password, redact
from support import senddock, worker_env

SECRET = "S3cr3t-pa55"
GOOD_DB = "postgresql://u@127.0.0.1:1/x"  # nothing listens: only reached when the rest is fine
GOOD_SMTP = "smtp://127.0.0.1:9?tls=none"

CASES = {
    "smtp scheme": (f"http://mailer:{SECRET}@relay.example", GOOD_DB),
    "smtp port": (f"smtp://mailer:{SECRET}@relay.example:notaport", GOOD_DB),
    "smtp parameter": (f"smtp://mailer:{SECRET}@relay.example?tls=bogus&x=1", GOOD_DB),
    "smtp raw @ in password": (f"http://mailer:{SECRET}@x@relay.example", GOOD_DB),
    "database ipv6": (GOOD_SMTP, f"postgresql://u:{SECRET}@[::1/x"),
    "database scheme": (GOOD_SMTP, f"mysql://u:{SECRET}@db.example/x"),
    "database unreachable": (GOOD_SMTP, f"postgresql://u:{SECRET}@127.0.0.1:1/x"),
    "database keywords": (GOOD_SMTP, f"host=127.0.0.1 port=1 password={SECRET} user=u x"),
    "database encoded": (GOOD_SMTP, "postgresql://u:S3cr3t%2Dpa55@[::1/x"),
}


@pytest.mark.parametrize("verbose", [False, True], ids=["quiet", "verbose"])
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("command", [("migrate",), ("worker", "--processes", "1")])
def test_a_bad_url_fails_in_one_line_without_its_password(
    case: str, verbose: bool, command: tuple[str, ...]
) -> None:
    smtp_url, database_url = CASES[case]
    env = worker_env(database_url, smtp_url)
    proc = senddock(env, *(["-v"] if verbose else []), *command, timeout=60)
    assert proc.returncode != 0, proc.stdout
    out = proc.stdout + proc.stderr
    assert "senddock: error: " in proc.stderr, proc.stderr
    assert SECRET not in out, out
    assert "pa55" not in out, out
    if verbose:  # the cause, traceback and all, was logged, and hid it too
        assert "DEBUG senddock: the cause of the error below" in proc.stderr, proc.stderr


def test_redact_hides_every_form_of_a_password() -> None:
    url = f"postgresql://u:{SECRET}@db/x"
    assert (
        redact(f'missing "=" after "{url}"', url) == 'missing "=" after "postgresql://u:***@db/x"'
    )
    assert redact(f"password {SECRET} refused", url) == "password *** refused"
    assert hide_password("smtp://a:b@c:25?tls=none") == "smtp://a:***@c:25?tls=none"
    assert hide_password("postgresql://h/x?password=pw&user=u") == (
        "postgresql://h/x?password=***&user=u"
    )
