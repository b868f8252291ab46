"""A private Dovecot as the bounce mailbox: IMAP, POP3 and LMTP on 127.0.0.1, its own config.

Debian's Dovecot with a configuration, state, log and Maildir in a directory of its own, one
user with a plain password; LMTP is how a relay (the private Postfix) delivers into it. No
system daemon is touched. Needs root (Dovecot's master starts as root), as CI runs.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

DOVECOT = "/usr/sbin/dovecot"
# The VERP addresses b+TOKEN@… are all user b: Dovecot strips the +TOKEN detail.
USER = "b"
PASSWORD = "bounce-box-password"

CONF = """\
base_dir = {root}/run
state_dir = {root}/state
log_path = {root}/dovecot.log
protocols = imap pop3 lmtp
listen = 127.0.0.1
ssl = no
disable_plaintext_auth = no
auth_mechanisms = plain login
mail_location = maildir:{root}/mail/%n
recipient_delimiter = +
default_login_user = dovenull
default_internal_user = dovecot
first_valid_uid = 1
mail_uid = nobody
mail_gid = nogroup
service imap-login {{
  inet_listener imap {{
    address = 127.0.0.1
    port = {imap}
  }}
  inet_listener imaps {{
    port = 0
  }}
}}
service pop3-login {{
  inet_listener pop3 {{
    address = 127.0.0.1
    port = {pop3}
  }}
  inet_listener pop3s {{
    port = 0
  }}
}}
service lmtp {{
  inet_listener lmtp {{
    address = 127.0.0.1
    port = {lmtp}
  }}
}}
passdb {{
  driver = passwd-file
  args = scheme=PLAIN username_format=%n {root}/users
}}
userdb {{
  driver = static
  args = uid=nobody gid=nogroup home={root}/home/%n
}}
"""


@dataclass(frozen=True)
class Mailbox:
    """A running private Dovecot: its ports and its one user."""

    imap: int
    pop3: int
    lmtp: int
    root: Path
    user: str = USER
    password: str = PASSWORD

    def log(self) -> str:
        path = self.root / "dovecot.log"
        return path.read_text(errors="replace") if path.exists() else ""


def available() -> str | None:
    """Why a private Dovecot cannot run here, or None."""
    for program in (DOVECOT, "/usr/lib/dovecot/imap", "/usr/lib/dovecot/lmtp"):
        if not os.path.exists(program):
            return (
                f"{program} is missing (apt-get install dovecot-imapd dovecot-pop3d dovecot-lmtpd)"
            )
    if os.geteuid() != 0:
        return "a private Dovecot needs root"
    return None


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@contextmanager
def private_dovecot(imap: int, pop3: int, lmtp: int) -> Iterator[Mailbox]:
    """Start Dovecot in a directory of its own; stopped and removed on exit."""
    root = Path(tempfile.mkdtemp(prefix="senddock-dovecot-"))
    root.chmod(0o755)
    for sub in ("mail", "home"):
        (root / sub).mkdir()
        shutil.chown(root / sub, user="nobody", group="nogroup")
    (root / "users").write_text(f"{USER}:{{PLAIN}}{PASSWORD}\n")
    conf = root / "dovecot.conf"
    conf.write_text(CONF.format(root=root, imap=imap, pop3=pop3, lmtp=lmtp))
    # Not captured through a pipe: the daemon it forks would hold the pipe open.
    with (root / "start.err").open("w") as err:
        started = subprocess.run(
            [DOVECOT, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=err, timeout=30
        )
    if started.returncode != 0:
        problem = (root / "start.err").read_text()
        raise RuntimeError(f"private Dovecot did not start: {problem}")
    box = Mailbox(imap, pop3, lmtp, root)
    try:
        deadline = time.monotonic() + 20
        while not all(_listening(p) for p in (imap, pop3, lmtp)):
            if time.monotonic() > deadline:
                raise RuntimeError(f"private Dovecot never listened:\n{box.log()}")
            time.sleep(0.1)
        yield box
    finally:
        subprocess.run(
            [DOVECOT, "-c", str(conf), "stop"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=30,
            check=False,
        )
        shutil.rmtree(root, ignore_errors=True)
