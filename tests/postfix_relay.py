"""A private Postfix instance as the relay: Debian's Postfix with its own configuration and queue.

It listens on 127.0.0.1 only, relays everything to a "remote MX" the test runs, and mails its
delivery status notifications to the envelope sender's domain through a transport map, so a
DSN for `b+TOKEN@bounces.example.org` reaches the test's bounce listener: what a smarthost
does in production, with no system daemon touched and no DNS.

Needs root (Postfix's master starts as root and drops to the `postfix` user), as CI runs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

POSTFIX = "/usr/sbin/postfix"
MASTER_CF = "/etc/postfix/master.cf"
BOUNCE_DOMAIN = "bounces.example.org"

MAIN_CF = """\
compatibility_level = 3.6
queue_directory = {root}/queue
data_directory = {root}/data
meta_directory = /etc/postfix
daemon_directory = /usr/lib/postfix/sbin
command_directory = /usr/sbin
mail_owner = postfix
setgid_group = postdrop
inet_interfaces = 127.0.0.1
inet_protocols = ipv4
myhostname = relay.senddock.test
mydestination =
mynetworks = 127.0.0.0/8
relayhost = [127.0.0.1]:{remote_port}
transport_maps = inline:{{ {bounce_domain}={bounce_transport} }}
smtpd_relay_restrictions = permit_mynetworks, reject
alias_maps =
alias_database =
local_transport = error:local delivery disabled
maillog_file_prefixes = {root}
maillog_file = {root}/maillog
queue_run_delay = 1s
minimal_backoff_time = 1s
maximal_backoff_time = 2s
smtp_tls_security_level = none
smtp_host_lookup = native
smtputf8_enable = yes
"""


@dataclass(frozen=True)
class Relay:
    """A running private Postfix: where to send, and its log."""

    port: int
    root: Path

    @property
    def url(self) -> str:
        return f"smtp://127.0.0.1:{self.port}?tls=none"

    def log(self) -> str:
        path = self.root / "maillog"
        return path.read_text(errors="replace") if path.exists() else ""


def available() -> str | None:
    """Why a private Postfix cannot run here, or None."""
    if not os.path.exists(POSTFIX):
        return "Postfix is not installed (apt-get install postfix)"
    if os.geteuid() != 0:
        return "a private Postfix needs root"
    return None


def _postfix(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # Postfix reports its fatal errors to syslog, or to a terminal: `script` gives it one.
    command = " ".join([POSTFIX, "-c", str(root / "etc"), *args])
    return subprocess.run(
        ["script", "-qec", command, "/dev/null"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@contextmanager
def private_postfix(
    port: int, remote_port: int, bounce_port: int, *, lmtp: bool = False
) -> Iterator[Relay]:
    """Start Postfix with its configuration and queue in a directory of its own; stopped and
    removed on exit. (Not under pytest's tmp_path: the `postfix` user must reach the queue.)
    Its DSNs go to 127.0.0.1:`bounce_port` by SMTP, or by LMTP (a Dovecot mailbox)."""
    root = Path(tempfile.mkdtemp(prefix="senddock-postfix-"))
    root.chmod(0o755)
    for sub in ("etc", "queue", "data"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    shutil.chown(root / "data", user="postfix")
    (root / "etc" / "main.cf").write_text(
        MAIN_CF.format(
            root=root,
            remote_port=remote_port,
            bounce_transport=(
                f"lmtp:inet:127.0.0.1:{bounce_port}" if lmtp else f"smtp:[127.0.0.1]:{bounce_port}"
            ),
            bounce_domain=BOUNCE_DOMAIN,
        )
    )
    master = []
    for line in Path(MASTER_CF).read_text().splitlines():
        if line.startswith("smtp      inet"):
            line = f"127.0.0.1:{port} inet n - n - - smtpd"
        elif line.startswith("#postlog"):
            line = line[1:]
        master.append(line)
    (root / "etc" / "master.cf").write_text("\n".join(master) + "\n")
    started = _postfix(root, "start")
    if started.returncode != 0:
        raise RuntimeError(f"private Postfix did not start: {started.stdout}{started.stderr}")
    relay = Relay(port, root)
    try:
        deadline = time.monotonic() + 20
        while "daemon started" not in relay.log():
            if time.monotonic() > deadline:
                raise RuntimeError(f"private Postfix never said it started:\n{relay.log()}")
            time.sleep(0.1)
        yield relay
    finally:
        _postfix(root, "abort")
        shutil.rmtree(root, ignore_errors=True)
