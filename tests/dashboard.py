"""What the dashboard's tests share: the people (a users file with alice of ``ops``, an approver,
olga of ``oncall``, an operator, and bob of ``viewers``, who may only look), a real worker serving
tests/apps/desk.py, and the dashboard served by uvicorn on a free port of this machine (on a thread, or
as the ``outlast dashboard`` command in a process of its own), against the test's own schema and
prefix."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import httpx2 as httpx
import uvicorn

from outlast import Client
from outlast._model import RunRecord
from outlast.dashboard import create_app
from outlast.identity import add_user
from outlast.settings import Settings
from tests.conftest import ROOT, World, wait_for

DESK = "tests.apps.desk:app"
ROLES = '[roles]\noperator = ["oncall"]\napprover = ["ops"]\n\n'


@dataclass
class Desk:
    """One test's people, settings and client."""

    world: World
    settings: Settings
    client: Client
    alice: str  # ops: an approver (decides approvals, resolves in-doubt operations)
    bob: str  # viewers: may look, not act
    olga: str  # oncall: an operator (cancels, resumes, requeues dead letters)

    def reach(self, run_id: str, *states: str, timeout: float = 20.0) -> RunRecord:
        def look() -> RunRecord | None:
            run = self.client.status(run_id)
            return run if run.state in states else None

        got: RunRecord = wait_for(look, timeout, what=f"run {run_id} to be {' or '.join(states)}")
        return got

    def journal(self, run_id: str, kind: str) -> list[dict[str, Any]]:
        return [e.data for e in self.client.journal(run_id) if e.kind == kind]


@contextmanager
def desk(world: World) -> Iterator[Desk]:
    users = world.tmp / "users.toml"
    users.write_text(ROLES)
    alice = add_user(users, "alice", ["ops"])
    bob = add_user(users, "bob", ["viewers"])
    olga = add_user(users, "olga", ["oncall"])
    settings = world.settings(users=str(users))
    world.worker(DESK)
    with Client(settings=settings) as c:
        yield Desk(world, settings, c, alice, bob, olga)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def served(settings: Settings) -> Iterator[str]:
    """The dashboard served by uvicorn on a thread of this process; yields its base URL."""
    port = free_port()
    config = uvicorn.Config(
        create_app(settings),
        host="127.0.0.1",
        port=port,
        proxy_headers=False,  # as the command serves it (outlast/cli/dashboard.py says why)
        log_level="warning",
        timeout_graceful_shutdown=1,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="dashboard", daemon=True)
    thread.start()
    wait_for(lambda: server.started, 15, what="the dashboard to start")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(15)


def dashboard_process(world: World, *args: str, **env: str) -> str:
    """``outlast dashboard`` (with ``args``) in a process of its own, served by uvicorn as the
    command serves it; its base URL once it answers. The world stops it at the test's end."""
    port = free_port()
    log = world.tmp / f"dashboard-{port}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "outlast", "dashboard", "--port", str(port), *args],
            env=world.env(**env),
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
    world.procs.append(proc)
    base = f"http://127.0.0.1:{port}"

    def answers() -> httpx.Response | None:
        assert proc.poll() is None, log.read_text()
        try:
            return httpx.get(base + "/login", timeout=2)
        except httpx.TransportError:
            return None

    wait_for(answers, 20, what="the dashboard to answer")
    return base
