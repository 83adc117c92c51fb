"""Two apps on one queue: a worker whose app does not know a run's workflow never fails it. It hands
the run back while a worker that knows it is alive, and leaves it queued while none is; the run is
then taken by a worker of its own app. Real worker processes; the charges counted in the world."""

from __future__ import annotations

import time

from outlast import Client
from tests.conftest import World, wait_for

CHAT = "tests.apps.basic:app"
PAY = "tests.apps.other_app:app"


def _states(world: World) -> list[tuple[str, str | None]]:
    return world.sql("SELECT state, reason FROM runs WHERE workflow = 'pay_other' ORDER BY id")


def test_runs_of_an_unknown_workflow_wait_for_their_app(world: World) -> None:
    world.worker(CHAT)
    with Client(settings=world.settings()) as c:
        ids = [c.enqueue("pay_other", {"order": f"o{i}"}, run_id=f"o{i}").id for i in range(4)]
        wait_for(lambda: world.logged("run.unknown_workflow"), what="the chat worker to see a run")
        # Republished every second (the tests' republish_after), seen again by the chat worker: never taken.
        time.sleep(2.5)
        assert _states(world) == [("queued", None)] * 4, world.logs()[-3000:]
        world.worker(PAY)
        for run_id in ids:
            assert c.wait(run_id, timeout=120).state == "succeeded", world.logs()[-3000:]
    charges = world.sql("SELECT run_id, count(*) FROM executions GROUP BY run_id ORDER BY run_id")
    assert charges == [(f"o{i}", 1) for i in range(4)]
    assert not world.logged("run.serve_failed")


def test_both_apps_alive_every_run_reaches_its_own(world: World) -> None:
    world.worker(CHAT)
    world.worker(PAY)
    with Client(settings=world.settings()) as c:
        ids = [c.enqueue("pay_other", {"order": f"p{i}"}, run_id=f"p{i}").id for i in range(6)]
        ids += [c.enqueue("echo", {"i": i}).id for i in range(6)]
        finals = [c.wait(run_id, timeout=120) for run_id in ids]  # worker starts are slow under load
    assert [r.state for r in finals] == ["succeeded"] * 12, [(r.id, r.state, r.reason) for r in finals]
    charges = world.sql(
        "SELECT run_id, count(*) FROM executions WHERE starts_with(what, 'charge:') GROUP BY run_id"
    )
    assert sorted(charges) == [(f"p{i}", 1) for i in range(6)]


def test_a_worker_says_at_start_that_its_queue_carries_workflows_it_does_not_know(world: World) -> None:
    with Client(settings=world.settings()) as c:
        c.enqueue("pay_other", {"order": "q"}, run_id="q")
    world.worker(CHAT)
    found = wait_for(lambda: world.logged("worker.unknown_workflows"), what="the start warning")
    assert found[0]["workflows"] == ["pay_other"] and found[0]["queues"] == ["default"]
