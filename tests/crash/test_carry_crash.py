"""A run carried forward under real crashes: a worker process killed (SIGKILL, by its failpoint) right
at the carry, before its commit (``with_result_held:carry``: the generation's held results not yet
written either) and just after it (``after_fenced_write:carry``). Messages are sent before the
crash and while no worker is up. Counted in the world (tests/apps/chat.py): each message acted on
once (``handled``), taken by one operation, its event emitted once; every generation verifies."""

from __future__ import annotations

import pytest

from outlast import Client
from tests.apps import chat
from tests.conftest import World
from tests.crash import killed

pytestmark = pytest.mark.crash

APP = "tests.apps.chat:app"
EVERY, TOTAL = 3, 9


@pytest.mark.parametrize(
    ("point", "generation"), [("with_result_held:carry", 0), ("after_fenced_write:carry", 1)]
)
def test_a_worker_killed_at_the_carry_loses_and_doubles_no_message_nor_effect(
    world: World, point: str, generation: int
) -> None:
    chat.setup(world.database_url, world.schema)
    with Client(settings=world.settings()) as c:
        run_id = c.enqueue("chatter", {"every": EVERY, "total": TOTAL}).id
        for n in range(EVERY + 1):  # one more than the first generation takes: it waits for the next
            c.send(run_id, "in", {"n": n}, message_id=f"m-{n}")
        killed(world.worker(APP, OUTLAST_FAILPOINTS=point))
        assert world.sql("SELECT generation FROM runs WHERE id = %s", run_id) == [(generation,)]
        assert world.sql("SELECT count(*) FROM handled WHERE run_id = %s", run_id) == [(EVERY,)]
        for n in range(EVERY + 1, TOTAL):  # sent while no worker is up
            c.send(run_id, "in", {"n": n}, message_id=f"m-{n}")
        world.worker(APP)
        run = c.wait(run_id, timeout=90)
        assert run.state == "succeeded", run.reason
        assert (run.result, run.generation) == ({"done": TOTAL}, TOTAL // EVERY)
        handled = world.sql("SELECT n FROM handled WHERE run_id = %s ORDER BY n", run_id)
        assert [n for (n,) in handled] == list(range(TOTAL))  # each acted on once, none lost
        taken = world.sql("SELECT taken_op FROM messages WHERE run_id = %s AND taken_op IS NOT NULL", run_id)
        assert len(taken) == len(set(taken)) == TOTAL
        turns = sorted(e["detail"]["data"]["n"] for e in c.events(run_id) if e["kind"] == "custom:turn")
        assert turns == list(range(TOTAL))  # each event once
        assert c.state(run_id, "turns").value == TOTAL
        # a resume replays the current generation only: never more than one generation's entries
        resumed = [e["entries"] for e in world.logged("run.resumed", run_id=run_id)]
        assert all(n <= EVERY * 5 for n in resumed), resumed  # the run journaled TOTAL * 5 in all
        assert resumed or generation == 1  # killed before the carry: the ended generation replayed
        kept = c.generations(run_id)
        assert [g["generation"] for g in kept] == list(range(TOTAL // EVERY + 1))
        assert [c.verify(run_id, g["generation"]) for g in kept] == [None] * len(kept)
