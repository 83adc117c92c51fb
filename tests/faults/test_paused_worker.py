"""A worker paused (SIGSTOP) in the middle of a tool, past its lease: another worker takes the run
over, its reconciler finds no effect yet and executes; then the paused worker wakes and finishes
its own effect. No worker-side check can stop that late effect: the world must. Both worlds are
shown: with ``outlast.fence`` in the effect's transaction there is exactly one effect; with a bare
insert there are two (the README states this condition in its guarantee table)."""

from __future__ import annotations

import signal

import pytest

from outlast import Client
from tests.apps import paused
from tests.conftest import World, wait_for

APP = "tests.apps.paused:app"


def _pids(world: World, key: str, table: str) -> list[int]:
    return [pid for (pid,) in world.sql(f"SELECT pid FROM {table} WHERE key = %s ORDER BY id", key)]


@pytest.mark.parametrize("fenced", [True, False], ids=["fenced-world", "bare-world"])
def test_a_paused_worker_wakes_after_a_takeover(world: World, fenced: bool) -> None:
    paused.setup(world.database_url, world.schema)
    env = {"OUTLAST_LEASE_TTL": "1", "PAUSED_SLEEP": "2", "PAUSED_FENCED": "1" if fenced else ""}
    first = world.worker(APP, **env)
    with Client(settings=world.settings()) as c:
        run = c.enqueue("one_effect", {"tag": "t"})
        key = f"{run.id}:op-1"
        wait_for(lambda: _pids(world, key, "started"), 30, what="the tool to start")
        first.send_signal(signal.SIGSTOP)  # paused inside the tool, before its effect
        second = world.worker(APP, **env)
        wait_for(lambda: second.pid in _pids(world, key, "started"), 30, what="the takeover's dispatch")
        first.send_signal(signal.SIGCONT)
        done = c.wait(run.id, timeout=60)
    assert done.state == "succeeded"
    assert world.sql("SELECT fencing_token FROM runs WHERE id = %s", run.id)[0][0] >= 2
    # The woken worker's tool thread goes on (a thread cannot be stopped): wait until it is done.
    wait_for(lambda: first.pid in _pids(world, key, "finished"), 30, what="the paused tool to finish")
    effects = _pids(world, key, "effects")
    if fenced:
        assert len(effects) == 1, f"the fenced world took {len(effects)} effects"
    else:
        assert len(effects) == 2, f"expected the late duplicate of a bare world, got {effects}"
