"""CSV imports started over HTTP: answered at once with a job id, run in a background thread.

Progress lives in `import_jobs` (any process can poll it); the import itself is
audience.import_csv, the same as `senddock subscribers import`.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from senddock.audience import import_csv
from senddock.audience.importer import UnreadableFile
from senddock.db import connect

log = logging.getLogger("senddock.web.imports")

Conn = psycopg.Connection[dict[str, Any]]

KEEP_ERRORS = 100  # rejected lines kept on the job
PROGRESS_EVERY = 500  # write rows_read / rejected every this many rows

COLUMNS = (
    "id, list_name, status, rows_read, imported, rejected, errors, error, created_at, finished_at"
)


def create_job(conn: Conn, list_name: str) -> int:
    row = conn.execute(
        "INSERT INTO import_jobs (list_name) VALUES (%s) RETURNING id", (list_name,)
    ).fetchone()
    assert row is not None
    return int(row["id"])


def get_import(conn: Conn, job_id: int) -> dict[str, Any] | None:
    """The job's row (status, counts, first rejected lines), or None."""
    return conn.execute(
        f"SELECT {COLUMNS} FROM import_jobs WHERE id = %s",  # noqa: S608 (constant columns)
        (job_id,),
    ).fetchone()


def run_import(database_url: str, job_id: int, list_name: str, path: Path) -> None:
    """Import `path` into `list_name`, recording progress and outcome on job `job_id`.

    The file is deleted afterwards; any failure ends as status `failed` with a one-line error.
    """
    errors: list[dict[str, Any]] = []
    rejected = 0
    try:
        with connect(database_url) as conn, connect(database_url) as progress:
            conn.execute("UPDATE import_jobs SET status = 'running' WHERE id = %s", (job_id,))

            def on_reject(line: int, reason: str) -> None:
                nonlocal rejected
                rejected += 1
                if len(errors) < KEEP_ERRORS:
                    errors.append({"line": line, "reason": reason})
                if rejected % PROGRESS_EVERY == 0:
                    progress.execute(
                        "UPDATE import_jobs SET rejected = %s, errors = %s WHERE id = %s",
                        (rejected, Jsonb(errors), job_id),
                    )

            report = import_csv(conn, path, list_name, on_reject=on_reject)
            conn.execute(
                "UPDATE import_jobs SET status = 'done', imported = %s, rejected = %s,"
                " rows_read = %s, errors = %s, finished_at = now() WHERE id = %s",
                (
                    report.imported,
                    report.rejected_count,
                    report.imported + report.rejected_count,
                    Jsonb(errors),
                    job_id,
                ),
            )
    except (UnreadableFile, psycopg.Error, OSError, ValueError) as exc:
        _fail(database_url, job_id, errors, rejected, str(exc).replace(str(path), "the file"))
    except Exception as exc:  # a background thread: record, never vanish silently
        log.exception("import job %s failed", job_id)
        _fail(database_url, job_id, errors, rejected, f"{type(exc).__name__}: {exc}")
    finally:
        path.unlink(missing_ok=True)


def _fail(
    database_url: str, job_id: int, errors: list[dict[str, Any]], rejected: int, why: str
) -> None:
    """Record a job as failed with a one-line reason (the server's temp path left out)."""
    text = " ".join(why.split()) or "import failed"
    try:
        with connect(database_url) as conn:
            conn.execute(
                "UPDATE import_jobs SET status = 'failed', error = %s, errors = %s,"
                " rejected = %s, finished_at = now() WHERE id = %s",
                (text.replace("\x00", ""), Jsonb(errors), rejected, job_id),
            )
    except psycopg.Error:
        log.exception("could not record the failure of import job %s", job_id)


def start_import(app_state: Any, list_name: str, upload_path: Path) -> int:
    """Queue an import of `upload_path` (a file we own; deleted when done) into `list_name`;
    the job id. The import runs in a background thread of this process."""
    with app_state.pool.connection() as conn:
        job_id = create_job(conn, list_name)
    thread = threading.Thread(
        target=run_import,
        args=(app_state.database_url, job_id, list_name, upload_path),
        name=f"import-{job_id}",
        daemon=True,
    )
    thread.start()
    return job_id
