"""A workflow routed to a queue of its own (``@app.workflow(queue=...)``): a client given the app,
a child run and a schedule put its runs there; a worker of the app started with no ``--queue``
serves that queue beside the default one; a worker of another app on the default queue never sees
them. Real worker processes; the charges counted in the world."""

from __future__ import annotations

import time

import pytest

from outlast import App, Client
from tests.apps import routed
from tests.conftest import World

ROUTED = "tests.apps.routed:app"


def _queues(world: World) -> dict[str, str]:
    return dict(world.sql("SELECT id, queue FROM runs ORDER BY id"))


def test_a_routed_workflow_runs_on_its_own_queue_served_by_its_apps_worker(world: World) -> None:
    world.worker("tests.apps.basic:app")  # another app, on the default queue only
    world.worker(ROUTED)
    with Client(app=routed.app, settings=world.settings()) as c:
        c.enqueue("payout", {"order": "a"}, run_id="a")
        c.enqueue("payday", {"orders": ["b", "c"]}, run_id="day")
        c.enqueue("payout", {"order": "d"}, run_id="d", queue="default")  # named: it wins
        for run_id in ("a", "day", "d"):
            assert c.wait(run_id, timeout=120).state == "succeeded", world.logs()[-3000:]
        children = c.wait("day", timeout=30).result
    assert _queues(world) == {
        "a": "payouts",
        "d": "default",
        "day": "default",
        **{child: "payouts" for child in children},
    }
    charges = world.sql(
        "SELECT run_id, count(*) FROM executions WHERE starts_with(what, 'charge:') GROUP BY run_id"
    )
    assert sorted(charges) == [("a", 1), ("b", 1), ("c", 1), ("d", 1)]
    started = [e["queues"] for e in world.logged("worker.started")]
    assert ["default", "payouts"] in started, started
    # The basic app's worker serves the default queue only: of the payouts, it can see "d" alone.
    seen = {e["run_id"] for e in world.logged("run.unknown_workflow")}
    assert seen <= {"d", "day"}, seen


def test_a_worker_given_queues_serves_those_only(world: World) -> None:
    world.worker(ROUTED, "--queue", "default")
    with Client(app=routed.app, settings=world.settings()) as c:
        c.enqueue("payout", {"order": "e"}, run_id="e")
        time.sleep(3)
        assert c.status("e").state == "queued"
        world.worker(ROUTED, "--queue", "payouts")
        assert c.wait("e", timeout=120).state == "succeeded", world.logs()[-3000:]


def test_a_queue_name_a_workflow_cannot_have_is_refused_at_registration() -> None:
    app = App()
    with pytest.raises(TypeError, match="workflow 'w': the queue"):
        app.workflow("w", queue="no spaces")(routed.payout)
    assert routed.app.queues("default") == ["default", "payouts"]
    assert routed.app.queues("payouts") == ["payouts"]
    assert routed.app.queue_of("payout") == "payouts" and routed.app.queue_of("payday") is None
    assert routed.app.queue_of("unknown") is None
    routed_app = App()
    routed_app.workflow("w", queue="nightly")(routed.payout)
    routed_app.schedule("0 8 * * *", workflow="w")
    routed_app.schedule("0 9 * * *", workflow="w", name="late", queue="slow")
    assert {n: s.queue for n, s in routed_app.routed_schedules().items()} == {"w": "nightly", "late": "slow"}
