"""Child runs under real crashes: worker processes killed (SIGKILL, by their failpoints) after a
child row is committed but before its start is journaled, and after a run's final state is
committed but before its entry is acknowledged. Counted in the world: the child rows of each
parent, their ``enqueued`` events, and the results."""

from __future__ import annotations

import pytest

from outlast import Client
from tests.apps import family
from tests.conftest import World
from tests.crash import killed

pytestmark = pytest.mark.crash

APP = "tests.apps.family:app"


def test_fan_outs_killed_twice_start_each_child_once(world: World) -> None:
    family.setup(world.database_url, world.schema)
    with Client(settings=world.settings()) as c:
        parents = [c.enqueue("fan_out", {"n": 5, "child": "echo"}).id for _ in range(4)]
        killed(world.worker(APP, OUTLAST_FAILPOINTS="before_child_journaled"))
        killed(world.worker(APP, OUTLAST_FAILPOINTS="after_final"))
        world.worker(APP)
        for pid in parents:
            run = c.wait(pid, timeout=90)
            assert run.state == "succeeded", run.reason
            ids = [f"{pid}:op-{i}" for i in range(1, 6)]
            assert run.result == {"ids": ids, "results": [{"summary": f"T{i}"} for i in range(5)]}
            rows = world.sql("SELECT id, state FROM runs WHERE started_by = %s ORDER BY id", pid)
            assert rows == [(i, "succeeded") for i in ids]  # no second child, none left behind
            starts = world.sql(
                "SELECT count(*) FROM events e JOIN runs r ON r.id = e.run_id "
                "WHERE r.started_by = %s AND e.kind = 'enqueued'",
                pid,
            )
            assert starts == [(5,)]
        assert world.sql("SELECT count(*) FROM runs WHERE state <> 'succeeded'") == [(0,)]
