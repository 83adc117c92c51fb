"""A PgBouncer of the test's own: Debian's ``pgbouncer`` on a free loopback port, its ini and
userlist in a temporary directory, in front of the test Postgres (every database, by name, as the
user the test connects as, ``auth_type = trust``). Run as ``nobody`` when the tests run as root
(PgBouncer refuses root)."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

import psycopg
import pytest

from tests.conftest import wait_for
from tests.faults import TIMEOUT, free_port, stop_process


def pgbouncer_binary() -> str:
    found = shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin")
    if found is None:
        pytest.skip("no pgbouncer (Debian: apt-get install pgbouncer; .ci/run installs it)")
    return found


class PrivatePgBouncer:
    """Start and stop one PgBouncer in ``mode`` (transaction or session) in front of ``url``."""

    def __init__(self, url: str, mode: str, pool_size: int = 20) -> None:
        # A directory of its own under the system's temporary one: ``nobody`` must reach it.
        self.root = Path(tempfile.mkdtemp(prefix="outlast-pgbouncer-"))
        self.server = urlsplit(url)
        self.mode = mode
        self.port = free_port()
        self.pool_size = pool_size
        self.proc: subprocess.Popen[bytes] | None = None

    def url(self, base: str) -> str:
        """``base`` (a URL of the test Postgres) through this PgBouncer."""
        parts = urlsplit(base)
        user = f"{parts.username}@" if parts.username else ""
        return urlunsplit(parts._replace(netloc=f"{user}127.0.0.1:{self.port}"))

    def start(self) -> None:
        user = self.server.username or "postgres"
        (self.root / "userlist.txt").write_text(f'"{user}" ""\n')
        ini = self.root / "pgbouncer.ini"
        ini.write_text(
            "[databases]\n"
            f"* = host={unquote(self.server.hostname or '127.0.0.1')} port={self.server.port or 5432}\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {self.port}\nunix_socket_dir =\n"
            f"auth_type = trust\nauth_file = {self.root / 'userlist.txt'}\n"
            f"pool_mode = {self.mode}\ndefault_pool_size = {self.pool_size}\nmax_client_conn = 1000\n"
            "ignore_startup_parameters = extra_float_digits\n"
            f"logfile = {self.root / 'pgbouncer.log'}\npidfile = {self.root / 'pgbouncer.pid'}\n"
        )
        command = [pgbouncer_binary(), str(ini)]
        if os.geteuid() == 0:
            os.chmod(self.root, 0o777)
            command[1:1] = ["-u", self._user()]
        self.proc = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        probe = self.url(urlunsplit(self.server))

        def answers() -> bool:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"pgbouncer exited ({self.proc.returncode}): {self.log()[-2000:]}")
            try:
                psycopg.connect(probe, connect_timeout=2, autocommit=True).close()
            except psycopg.OperationalError:
                return False
            return True

        wait_for(answers, TIMEOUT, 0.1, "pgbouncer to answer")

    def _user(self) -> str:
        """Whom PgBouncer runs as (it refuses root): the owner of the server's socket directory
        where the server is reached by a socket (the embedded default's is private), else nobody."""
        host = unquote(self.server.hostname or "")
        if host.startswith("/") and os.path.isdir(host):
            return pwd.getpwuid(os.stat(host).st_uid).pw_name
        return "nobody"

    def log(self) -> str:
        f = self.root / "pgbouncer.log"
        return f.read_text(errors="replace") if f.exists() else ""

    def stop(self) -> None:
        stop_process(self.proc, signal.SIGINT)  # SIGINT: PgBouncer shuts down at once
        self.proc = None

    def destroy(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)
