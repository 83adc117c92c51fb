"""``set_state`` and ``emit`` exactly once across a real crash: a worker process killed just after
the journal entry (and the row it writes) is committed, before the workflow goes on
(``after_shown:state``, ``after_shown:event``); a fresh worker takes the run over and replays it.
Counted in the world: the state rows and their versions, the custom event rows, the journal
entries, and the tool's dispatches."""

from __future__ import annotations

import pytest

from outlast import Client
from tests.conftest import World, wait_for
from tests.crash import killed

pytestmark = pytest.mark.crash

APP = "tests.apps.shows:app"
STEPS = 3


@pytest.mark.parametrize("what", ["state", "event"])
def test_killed_after_a_shown_entry_is_committed_it_is_shown_once(world: World, what: str) -> None:
    with Client(settings=world.settings()) as client:
        rid = client.enqueue("progress", {"steps": STEPS}).id
        killed(world.worker(APP, OUTLAST_FAILPOINTS=f"after_shown:{what}"))
        entries = world.sql("SELECT kind FROM journal WHERE run_id = %s ORDER BY seq", rid)
        assert entries[-1] == (what,), entries  # killed with its entry committed, nothing after
        world.worker(APP)
        run = wait_for(lambda: (r := client.status(rid)).final and r, 60, 0.2, f"run {rid} to end")
        assert run.state == "succeeded", (run.state, run.reason)

        assert world.sql("SELECT key, version, value FROM run_state WHERE run_id = %s ORDER BY key", rid) == [
            ("done", 1, True),
            ("step", STEPS, STEPS - 1),
        ]
        custom = world.sql(
            "SELECT detail->'data' FROM events WHERE run_id = %s AND kind = 'custom:step' ORDER BY id", rid
        )
        assert custom == [({"i": i},) for i in range(STEPS)]
        kinds = [k for (k,) in world.sql("SELECT kind FROM journal WHERE run_id = %s", rid)]
        assert kinds.count("state") == STEPS + 1 and kinds.count("event") == STEPS
        notes = world.sql(
            "SELECT what, count(*) FROM executions WHERE run_id = %s GROUP BY what ORDER BY what", rid
        )
        assert notes == [(f"step-{i}", 1) for i in range(STEPS)]
        assert "ResumeImpossible" not in world.logs()
