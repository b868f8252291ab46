"""The dot log: which final dot each sender was about to write, for a rescuer on the same host.

A job is `unconfirmed` after a crash when the mark of its final dot was committed (issue 23):
the mark must be durable before the dot, so it commits a little ahead of it, with the outcome
of the message before (0025) while the envelope goes out. A SIGKILL between that commit and
the dot left a false alarm, a decision for a person about a message that never left (issue 41:
0.65-0.73 of unconfirmed jobs were accepted on a quiet machine, `bench/unconfirmed_precision.py`).
Moving the commit next to the dot made the dot wait for it and cost far more than 2 % of the
drain (docs/unconfirmed-precision-2026-12-07.md).

So the mark stays where it is, and each worker process also keeps this small file: one slot per
sender, holding the job (id and attempt) whose final dot it is about to write, stored into a
shared mapping of the file (no system call) after the mark is committed, right before the
write that carries the dot (smtp/session.py, `at_dot`). A SIGKILL takes the process's memory
but not the page cache: the file still says, to a process on the same host and boot, which
dots may have gone. Each sender writes the next dot's job over the last only once the last
one's outcome is committed (invariant 3), so a job still `sending` with its mark committed
whose sender's slot names another job never had its dot written.

The rescuer that buries a dead peer on its own host (delivery/rescuer.py) reads the peer's file
once the peer's lock on it is free: the kernel frees a file lock only when the last process
holding it is gone, so no dot can follow the read. Such a job then goes back to retry like any
whose dot did not go (queue/jobs.sql, rescue), and only the jobs in a slot become unconfirmed.
Anything that leaves doubt leaves the jobs unconfirmed, as without the file: a peer on another
host (it cannot read the file), a host rebooted since (the page cache is gone), a lock still
held (the writer, or a child it forked, may be alive), a file missing or not as written here.

Not a duplicate's risk: a slot only ever names a job whose dot may have gone, so reading it can
only spare a person a decision about a dot that did not.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import mmap
import os
import secrets
import stat
import struct
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("senddock.worker")

MAGIC = b"SDDOTS01"
# Header: magic, the writer's boot id (36 ASCII characters, zero padded), its pid, its slots.
HEADER = struct.Struct("<8s40sqq")
# A slot: the job id and attempt of the sender's last final dot about to go (0, 0: none yet).
SLOT = struct.Struct("<qq")
SUFFIX = ".dots"
# A file no process holds, made this long ago, is left over (its jobs were rescued by a peer
# on another host, or the rescue failed after reading it): removed when a worker starts.
STALE_SECONDS = 86_400.0


def boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def default_directory() -> Path:
    """Where dot logs live unless SENDDOCK_DOT_LOG_DIR says: memory-backed /dev/shm when the
    host has it (nothing to write to disk, gone at a reboot, when it could no longer be
    trusted anyway), else the temporary directory; one folder per user."""
    shm = Path("/dev/shm")
    base = shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())
    return base / f"senddock-{os.getuid()}"


def directory(setting: str) -> Path | None:
    """The folder of dot logs as SENDDOCK_DOT_LOG_DIR names it; None when `off`."""
    if setting.strip().lower() == "off":
        return None
    return Path(setting) if setting.strip() else default_directory()


def _private_folder(folder: Path) -> bool:
    """Make `folder` if missing; True if it is ours alone (another user's files are never read
    or trusted)."""
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = folder.lstat()
    except OSError:
        return False
    ours = stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid()
    return ours and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


class DotLog:
    """A worker process's dot log, written by its senders (`note`) and held locked until the
    process is gone."""

    def __init__(self, path: Path, fd: int, slots: int) -> None:
        self.path = path
        self._fd = fd
        self._slots = slots
        self._map = mmap.mmap(fd, HEADER.size + slots * SLOT.size, mmap.MAP_SHARED)

    @classmethod
    def create(cls, folder: Path | None, slots: int) -> DotLog | None:
        """A new dot log in `folder` for `slots` senders, locked; None (and a warning) if it
        cannot be made: the worker then runs as before, every marked job of its death
        unconfirmed."""
        me = boot_id()
        if folder is None or not me or slots < 1:
            return None
        if not _private_folder(folder):
            log.warning("dot log: %s is not a private folder; not kept", folder)
            return None
        path = folder / f"{secrets.token_hex(12)}{SUFFIX}"
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except OSError as exc:
            log.warning("dot log: cannot create %s (%s); not kept", path, exc)
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            header = HEADER.pack(MAGIC, me.encode("ascii", "replace"), os.getpid(), slots)
            # Every page written now: a store into the mapping never needs memory later.
            os.write(fd, header + bytes(slots * SLOT.size))
            return cls(path, fd, slots)
        except OSError as exc:
            log.warning("dot log: cannot write %s (%s); not kept", path, exc)
            os.close(fd)
            with contextlib.suppress(OSError):
                path.unlink()
            return None

    def note(self, slot: int, job_id: int, attempt: int) -> None:
        """Sender `slot` is about to write the final dot of `job_id` at `attempt`."""
        SLOT.pack_into(self._map, HEADER.size + slot * SLOT.size, job_id, attempt)

    def close(self, *, remove: bool) -> None:
        """At exit. `remove`: nothing it held is left to rescue (the worker deregistered), so
        nobody will read it; otherwise it stays for the rescuer."""
        self._map.close()
        if remove:
            with contextlib.suppress(OSError):
                self.path.unlink()
        os.close(self._fd)


class NoDotLog:
    """A worker without a dot log (SENDDOCK_DOT_LOG_DIR=off, no /proc, or it could not be
    made): every marked job of its death becomes unconfirmed."""

    path = None

    def note(self, slot: int, job_id: int, attempt: int) -> None:
        pass

    def close(self, *, remove: bool) -> None:
        pass


@dataclass(frozen=True)
class Read:
    """A dead writer's dot log: the (job id, attempt) each of its senders was about to send."""

    path: Path
    dots: frozenset[tuple[int, int]]


def read_dead(path: str, boot: str, pid: int) -> Read | None:
    """The dot log at `path` of a worker that ran here as `pid` in boot `boot`, if it can be
    trusted: its writer is gone (its lock is free), this host has not rebooted since, and the
    file is ours and as `DotLog.create` made it. None otherwise: its jobs stay unconfirmed."""
    me = boot_id()
    if not me or boot != me or not path.endswith(SUFFIX):
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                return None  # its writer, or a process it forked, is still alive
            raise
        data = os.pread(fd, st.st_size, 0)
    except OSError as exc:
        log.warning("dot log %s unreadable (%s); its jobs stay unconfirmed", path, exc)
        return None
    finally:
        os.close(fd)
    if len(data) < HEADER.size:
        return None
    magic, written_boot, written_pid, slots = HEADER.unpack_from(data)
    if (
        magic != MAGIC
        or written_boot.rstrip(b"\0").decode("ascii", "replace") != me
        or written_pid != pid
        or len(data) != HEADER.size + slots * SLOT.size
    ):
        return None
    dots = frozenset(
        (job, attempt) for job, attempt in SLOT.iter_unpack(data[HEADER.size :]) if job != 0
    )
    return Read(Path(path), dots)


def remove(path: Path) -> None:
    """A dead writer's dot log, read and acted on."""
    with contextlib.suppress(OSError):
        path.unlink()


def remove_stale(folder: Path | None, keep: Path | None = None) -> int:
    """Remove left-over dot logs in `folder`: those no process holds that an earlier boot
    wrote, or that were made STALE_SECONDS ago. The number removed. (Removing one that was
    still to be read costs a decision, never a duplicate: its jobs stay unconfirmed.)"""
    if folder is None:
        return 0
    removed = 0
    now = time.time()
    me = boot_id().encode("ascii", "replace")
    try:
        names = list(folder.glob(f"*{SUFFIX}"))
    except OSError:
        return 0
    for path in names:
        if path == keep:
            continue
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            st = os.fstat(fd)
            head = os.pread(fd, HEADER.size, 0)
            other_boot = len(head) < HEADER.size or HEADER.unpack(head)[1].rstrip(b"\0") != me
            if other_boot or now - st.st_mtime > STALE_SECONDS:
                path.unlink()
                removed += 1
        except OSError:
            pass
        finally:
            os.close(fd)
    return removed
