"""What the dashboard's tests share: the people (a users file with alice of ``ops``, an approver,
olga of ``oncall``, an operator, and bob of ``viewers``, who may only look), a real worker serving
tests/apps/desk.py, and the dashboard served by uvicorn on a free port of this machine, against
the test's own schema and prefix."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import uvicorn

from outlast import Client
from outlast.dashboard import create_app
from outlast.identity import add_user
from outlast.model import Run
from outlast.settings import Settings
from tests.conftest import World, wait_for

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

    def reach(self, run_id: str, *states: str, timeout: float = 20.0) -> Run:
        def look() -> Run | None:
            run = self.client.status(run_id)
            return run if run.state in states else None

        got: Run = wait_for(look, timeout, what=f"run {run_id} to be {' or '.join(states)}")
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
        create_app(settings), host="127.0.0.1", port=port, log_level="warning", timeout_graceful_shutdown=1
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
