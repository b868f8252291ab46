"""CSV imports started over HTTP, as durable jobs: any worker or `serve` process runs them.

The upload is kept in `import_uploads` until its import ends. A process's import service
(senddock/runtime.py, `Imports`) takes a job not ended under a session advisory lock, and
imports it a chunk (importer.BATCH rows) per transaction; each chunk's transaction also adds
its counts to the job, and `rows_read` says where a resumed import starts. A process that
dies mid-import lets go of the lock with its connection, and the next one to look resumes
after the last chunk committed: every row imported exactly once, and counted once.

The rows go in as `senddock subscribers import` puts them (audience/importer.py).
"""

from __future__ import annotations

import io
import logging
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from senddock.audience import importer
from senddock.audience.importer import RowReader, UnreadableFile
from senddock.db import sql

log = logging.getLogger("senddock.imports")

Conn = psycopg.Connection[dict[str, Any]]
Q = sql.load(__package__, "import_jobs.sql")

KEEP_ERRORS = 100  # rejected lines kept on the job
LOCK_CLASS = 0x5349  # first key of an import's advisory lock; the second is the job id
# What a failure's message calls the file (the server's temp path never shows).
THE_FILE = Path("the file")


def create(conn: Conn, list_name: str, content: bytes) -> int:
    """A queued job for `content`, to import into `list_name`; its id."""
    with conn.transaction():
        row = conn.execute(Q["create"], {"list": list_name}).fetchone()
        assert row is not None
        job_id = int(row["id"])
        conn.execute(Q["keep_upload"], {"id": job_id, "content": content})
    return job_id


@dataclass(frozen=True)
class RejectedLine:
    """A line of the file not imported, and why."""

    line: int
    reason: str


@dataclass(frozen=True)
class ImportJobView:
    """An import's progress as every face shows it: status (queued, running, done, failed),
    rows read, imported, rejected, the first rejected lines, the error that ended it."""

    id: int
    list_name: str
    status: str
    rows_read: int
    imported: int
    rejected: int
    errors: list[RejectedLine]
    error: str | None
    created_at: datetime
    finished_at: datetime | None


def get(conn: Conn, job_id: int) -> ImportJobView | None:
    """The job's progress (status, counts, first rejected lines), or None."""
    row = conn.execute(Q["get"], {"id": job_id}).fetchone()
    if row is None:
        return None
    errors = [RejectedLine(int(e["line"]), str(e["reason"])) for e in row.pop("errors") or []]
    return ImportJobView(**row, errors=errors)


@dataclass
class _Running:
    """The job this connection holds the lock of, and its file read up to where it is."""

    conn: Conn
    job_id: int
    list_id: int
    reader: RowReader
    handle: io.TextIOBase
    kept: int  # rejected lines kept on the job so far


class Importer:
    """Runs the jobs, a chunk a call, on the connection it is given."""

    def __init__(self) -> None:
        self._running: _Running | None = None

    def run_once(self, conn: Conn) -> bool:
        """Import the next chunk of a job (taking one if none is running here); False when
        there is nothing to do."""
        running = self._running
        if running is not None and running.conn is not conn:
            running.handle.close()  # its connection, and the lock with it, is gone
            running = self._running = None
        if running is None:
            running = self._running = self._take(conn)
            if running is None:
                return False
        try:
            ended = self._chunk(running)
        except psycopg.OperationalError:
            raise  # the connection: the service reconnects, and the job resumes
        except (UnreadableFile, psycopg.Error, OSError, ValueError) as exc:
            self._fail(running, str(exc))
            return True
        except Exception as exc:  # record, never vanish silently
            log.exception("import job %s failed", running.job_id)
            self._fail(running, f"{type(exc).__name__}: {exc}")
            return True
        if ended:
            self._end(running)
        return True

    def _take(self, conn: Conn) -> _Running | None:
        for row in conn.execute(Q["open_jobs"]).fetchall():
            job_id = int(row["id"])
            lock = {"cls": LOCK_CLASS, "id": job_id}
            got = conn.execute(Q["try_lock"], lock).fetchone()
            if not got or not got["ok"]:
                continue  # another process runs it
            job = conn.execute(Q["take"], {"id": job_id}).fetchone()
            upload = conn.execute(Q["upload"], {"id": job_id}).fetchone()
            if job is None or upload is None:  # it ended between the two reads
                conn.execute(Q["unlock"], lock)
                continue
            handle = importer.open_bytes(bytes(upload["content"]))
            try:
                reader = RowReader(handle, THE_FILE)
                list_id = importer.prepare(conn, str(job["list_name"]))
            except psycopg.OperationalError:
                raise
            except (UnreadableFile, psycopg.Error, ValueError) as exc:
                handle.close()
                _fail(conn, job_id, str(exc))
                continue
            if job["rows_read"]:
                log.info("import job %s resumes after row %s", job_id, job["rows_read"])
            reader.skip(int(job["rows_read"]))
            return _Running(conn, job_id, list_id, reader, handle, int(job["kept"]))
        return None

    def _chunk(self, running: _Running) -> bool:
        """Import the next chunk and count it, in one transaction; True if it was the last."""
        chunk = running.reader.chunk()
        room = max(0, KEEP_ERRORS - running.kept)
        errors = [{"line": line, "reason": why} for line, why in chunk.rejected[:room]]
        conn = running.conn
        with conn.transaction():
            if chunk.staged:
                importer.merge(conn, running.list_id, chunk.staged)
            progress = {
                "id": running.job_id,
                "rows": chunk.rows,
                "imported": len(chunk.staged),
                "rejected": len(chunk.rejected),
                "errors": Jsonb(errors),
            }
            conn.execute(Q["progress"], progress)
            if chunk.ended:
                conn.execute(Q["done"], {"id": running.job_id})
                conn.execute(Q["drop_upload"], {"id": running.job_id})
        running.kept += len(errors)
        return chunk.ended

    def _end(self, running: _Running) -> None:
        running.handle.close()
        running.conn.execute(Q["unlock"], {"cls": LOCK_CLASS, "id": running.job_id})
        self._running = None

    def _fail(self, running: _Running, why: str) -> None:
        running.handle.close()
        self._running = None
        _fail(running.conn, running.job_id, why)


def _fail(conn: Conn, job_id: int, why: str) -> None:
    """Record a job as failed with a one-line reason, and let go of it."""
    text = " ".join(why.split()).replace("\x00", "") or "import failed"
    with conn.transaction():
        conn.execute(Q["fail"], {"id": job_id, "error": text})
        conn.execute(Q["drop_upload"], {"id": job_id})
    conn.execute(Q["unlock"], {"cls": LOCK_CLASS, "id": job_id})
