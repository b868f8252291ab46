"""A CSV download: rows written to a spooled temporary file (memory up to SPOOL, then disk)
while the request holds its database connection, then streamed from it with the connection
given back, so memory stays flat at any size and a slow client holds no connection. Used by
the API's exports (web/exports_api.py) and the dashboard's (dashboard/audience_ops.py)."""

from __future__ import annotations

import io
import tempfile
from collections.abc import Callable, Iterator
from typing import Any, TextIO

from fastapi.responses import StreamingResponse

SPOOL = 8 * 1024 * 1024
# The 200 of a CSV route in the OpenAPI document (its errors are the API's JSON ones).
CSV: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/csv": {}}, "description": "CSV with a header row"}
}


def csv_download(write: Callable[[TextIO], int], filename: str) -> StreamingResponse:
    """What `write` writes, as a CSV attachment named `filename`."""
    spool = tempfile.SpooledTemporaryFile(max_size=SPOOL, mode="w+b")  # noqa: SIM115
    text = io.TextIOWrapper(spool, encoding="utf-8", newline="")
    try:
        write(text)
        text.flush()
        text.detach()
    except BaseException:
        spool.close()
        raise
    spool.seek(0)

    def chunks() -> Iterator[bytes]:
        with spool:
            while block := spool.read(64 * 1024):
                yield block

    return StreamingResponse(
        chunks(),
        media_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="{filename}"'},
    )
