"""Watches the nemesis as it runs, each on a thread of its own: the takeover of the runs a worker
held when a fault killed, stopped or paused it (the delay to another claim, seen as a newer fencing
token), and an ``outlast dashboard`` process probed once a second (an HTTP GET of a run's API)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

from outlast.identity import add_user
from tests.conftest import ROOT
from tests.dashboard import free_port

Sql = Callable[..., list[tuple[Any, ...]]]


class Takeovers:
    """Every 0.25 s, which worker holds which run; the runs a stricken worker held (as last seen,
    so also while Postgres is out of reach) are then watched until a newer claim takes each (its
    delay from the fault is kept by kind) or it ends under its holder's token."""

    def __init__(self, sql: Sql) -> None:
        self.sql = sql
        self.pending: dict[str, tuple[int, float, str]] = {}  # run -> token, fault's time, kind
        self.delays: dict[str, list[float]] = defaultdict(list)
        self.kept = 0  # runs its holder ended or parked itself (a pause shorter than the lease...)
        self.held: list[tuple[str, int, str]] = []  # run, token, owner: the last look
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.poll, name="takeovers", daemon=True)

    def struck(self, worker: str, kind: str) -> None:
        """Called just before the fault strikes ``worker``: the runs it holds now are watched."""
        at = time.time()
        with self.lock:
            for rid, token, owner in self.held:
                if owner == worker or owner.startswith(f"{worker}-"):
                    self.pending.setdefault(rid, (token, at, kind))

    def poll(self) -> None:
        while not self.stopping.wait(0.25):
            with self.lock:
                ids = list(self.pending)
            try:
                held = self.sql(
                    "SELECT id, fencing_token, owner FROM runs WHERE state IN ('running', 'cancelling')"
                )
                rows = self.sql("SELECT id, fencing_token, state FROM runs WHERE id = ANY(%s)", ids)
            except psycopg.Error:
                continue
            now = time.time()
            with self.lock:
                self.held = [(r, t, o or "") for r, t, o in held]
                for rid, token, state in rows:
                    was, at, kind = self.pending[rid]
                    if token > was:
                        self.delays[kind].append(now - at)
                        del self.pending[rid]
                    elif state not in ("running", "cancelling", "queued"):  # a hand-over: queued
                        self.kept += 1
                        del self.pending[rid]

    def stop(self) -> None:
        self.stopping.set()
        if self.thread.is_alive():
            self.thread.join(10)


class Dashboard:
    """``outlast dashboard`` in a process of its own (a viewer's token), GET ``/api/runs/RUN`` once a
    second: each probe answered (any status below 500: a run not yet enqueued is a 404) or failed."""

    def __init__(self, env: dict[str, str], folder: Path, run_id: str) -> None:
        users = folder / "users.toml"
        users.write_text("")
        self.token = add_user(users, "nemesis", ["viewers"])
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/api/runs/{run_id}"
        self.env, self.folder = dict(env, OUTLAST_USERS=str(users)), folder
        self.started = 0
        self.proc = self.start()
        self.probes: list[tuple[float, str]] = []  # wall-clock time, why it failed ("": answered)
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.poll, name="dashboard", daemon=True)

    def start(self) -> subprocess.Popen[bytes]:
        """The process (again, after it exited: one started while Postgres is out of reach exits, as
        a supervisor would see), its log in the folder."""
        self.started += 1
        with open(self.folder / f"dashboard-{self.started}.log", "wb") as out:
            return subprocess.Popen(
                [sys.executable, "-m", "outlast", "dashboard", "--port", str(self.port)],
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
            )

    def revive(self) -> None:
        if self.proc.poll() is not None:
            self.proc = self.start()

    def probe(self) -> str:
        """ "" when answered, else why not (an HTTP status, or the error's class)."""
        request = urllib.request.Request(self.url, headers={"Authorization": f"Bearer {self.token}"})
        try:
            with urllib.request.urlopen(request, timeout=3):
                return ""
        except urllib.error.HTTPError as exc:
            return "" if exc.code < 500 else f"HTTP {exc.code}"
        except urllib.error.URLError as exc:  # the connection's own error
            return f"URLError: {exc.reason}"[:60]
        except OSError as exc:
            return type(exc).__name__

    def poll(self) -> None:
        while not self.stopping.wait(1.0):
            self.probes.append((time.time(), self.probe()))

    def recovered(self, within: float) -> bool:
        """Whether a probe is answered within ``within`` seconds (after the faults healed)."""
        until = time.monotonic() + within
        while time.monotonic() < until:
            if self.proc.poll() is None and not self.probe():
                return True
            time.sleep(0.5)
        return False

    def stop(self) -> None:
        self.stopping.set()
        if self.thread.is_alive():
            self.thread.join(10)
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
