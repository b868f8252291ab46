"""CSV imports started over HTTP: answered at once with a job id, run as a durable job.

The upload goes into the database with its job (audience/import_jobs.py); the import service
of any worker or `serve` process (senddock/runtime.py) runs it, and resumes it after a crash.
Progress lives in `import_jobs` (any process can poll it); the rows go in as with
`senddock subscribers import`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg

from senddock.audience import import_jobs

Conn = psycopg.Connection[dict[str, Any]]


def get_import(conn: Conn, job_id: int) -> import_jobs.ImportJobView | None:
    """The job's progress (status, counts, first rejected lines), or None."""
    return import_jobs.get(conn, job_id)


def start_import(app_state: Any, list_name: str, upload_path: Path) -> int:
    """Queue an import of `upload_path` (a file we own, deleted here) into `list_name`; the
    job id. Its content is kept in the database until the import ends."""
    try:
        content = upload_path.read_bytes()
        with app_state.pool.connection() as conn:
            return import_jobs.create(conn, list_name, content)
    finally:
        upload_path.unlink(missing_ok=True)
