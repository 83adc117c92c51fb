"""A private Postgres primary and its synchronous standby (the failover test's, the nemesis's)."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

import psycopg

from tests.conftest import wait_for
from tests.faults import PrivatePostgres, _children


class Pair:
    """A private primary and its synchronous standby, each a Postgres of its own (same binaries,
    its own port and directory under ``root``)."""

    def __init__(self, root: Path) -> None:
        (root / "primary").mkdir()
        (root / "standby").mkdir()
        self.primary = PrivatePostgres(root / "primary")
        self.standby = PrivatePostgres(root / "standby")
        self.standby.bindir = self.primary.bindir

    def url(self) -> str:
        """Both hosts, the writable one wanted: libpq tries them in turn (docs/postgres-ha.md)."""
        hosts = f"127.0.0.1:{self.primary.port},127.0.0.1:{self.standby.port}"
        return f"postgresql://postgres@{hosts}/postgres?target_session_attrs=read-write"

    def start(self) -> None:
        self.primary.init()
        self.primary.start()
        self.standby._run(
            self.primary.bindir / "pg_basebackup", "-h", "127.0.0.1", "-p", str(self.primary.port),
            "-U", "postgres", "-D", self.standby.data, "-R", "-X", "stream", "--no-sync",
        )  # fmt: skip
        self.standby.start()
        with psycopg.connect(self.primary.url(), autocommit=True) as c:
            # From here a commit returns only once the standby has the WAL on disk.
            c.execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
            c.execute("SELECT pg_reload_conf()")
        wait_for(self._synchronous, 30, 0.05, "the standby to be synchronous")

    def _synchronous(self) -> bool:
        with psycopg.connect(self.primary.url(), autocommit=True) as c:
            rows = c.execute("SELECT sync_state FROM pg_stat_replication").fetchall()
        return rows == [("sync",)]

    def crash_primary(self) -> None:
        """SIGKILL the postmaster and every one of its processes at once: no shutdown, no goodbye."""
        pid = self.primary.postmaster()
        assert pid is not None, "the primary is not running"
        for p in [pid, *_children(pid)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)
        wait_for(lambda: not self.primary.running(), 10, 0.02, "the primary to be gone")

    def promote(self) -> None:
        ctl = self.standby.bindir / "pg_ctl"
        self.standby._run(ctl, "promote", "-w", "-t", "30", "-D", self.standby.data)

    def destroy(self) -> None:
        self.primary.destroy()
        self.standby.destroy()
