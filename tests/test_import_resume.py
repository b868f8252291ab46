"""An HTTP import survives the death of the process running it (issue 20.6): the upload is kept
in the database and progress is written per chunk with the rows it imported, so the next
`serve` (or worker) resumes after the last chunk committed and every row is imported once."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from typing import Any

import pytest

from support import Conn, wait_until
from web_support import ServerFactory, make_token, servers

ROWS = 200_000
BAD_EVERY = 1_000  # every 1,000th row has an address nobody can have: rejected


@pytest.fixture
def serve(db_url: str) -> Iterator[ServerFactory]:
    yield from servers(db_url)


def _csv() -> tuple[bytes, int, int]:
    """A big CSV: its bytes, the rows it imports and the rows it rejects."""
    lines = [b"email,name"]
    bad = 0
    for i in range(ROWS):
        if i % BAD_EVERY == BAD_EVERY - 1:
            lines.append(f"not-an-address-{i},Bad".encode())
            bad += 1
        else:
            lines.append(f"row{i}@example.org,Row {i}".encode())
    return b"\n".join(lines) + b"\n", ROWS - bad, bad


def _job(conn: Conn, job_id: int) -> dict[str, Any]:
    row = conn.execute(
        "SELECT status, rows_read, imported, rejected, errors FROM import_jobs WHERE id = %s",
        (job_id,),
    ).fetchone()
    assert row is not None
    return row


def _members(conn: Conn) -> int:
    row = conn.execute("SELECT count(*) AS n FROM list_memberships").fetchone()
    assert row is not None
    return int(row["n"])


def test_an_import_whose_server_is_sigkilled_mid_file_resumes_and_imports_every_row_once(
    db_url: str, conn: Conn, serve: ServerFactory
) -> None:
    data, good, bad = _csv()
    token = make_token(db_url)
    first = serve(workers=False)
    with first.client(token) as c:
        r = c.post("/api/v1/imports", data={"list": "big"}, files={"file": ("big.csv", data)})
    assert r.status_code == 202, r.text
    job_id = int(r.json()["id"])
    # Killed once some rows are in, well before the last.
    assert wait_until(lambda: _members(conn) > 0, timeout=60, every=0.05)
    os.kill(first.proc.pid, signal.SIGKILL)
    first.proc.wait(10)
    cut = _job(conn, job_id)
    assert cut["status"] == "running", cut
    assert 0 < _members(conn) < good, "the import was not cut off mid-file"

    second = serve(workers=False)
    with second.client(token) as c:
        assert wait_until(
            lambda: c.get(f"/api/v1/imports/{job_id}").json()["status"] in ("done", "failed"),
            timeout=180,
            every=0.2,
        ), _job(conn, job_id)
        job = c.get(f"/api/v1/imports/{job_id}").json()
    assert job["status"] == "done", job
    assert (job["imported"], job["rejected"], job["rows_read"]) == (good, bad, ROWS), job
    lines = [e["line"] for e in job["errors"]]
    assert lines == [BAD_EVERY * (k + 1) + 1 for k in range(100)], lines[:5]
    assert _members(conn) == good
    row = conn.execute("SELECT count(*) AS n FROM subscribers").fetchone()
    assert row is not None and row["n"] == good
    left = conn.execute("SELECT count(*) AS n FROM import_uploads").fetchone()
    assert left is not None and left["n"] == 0, "the upload outlived its import"
