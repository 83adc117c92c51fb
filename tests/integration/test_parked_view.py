"""Runs parked until a person acts (a bug, a program no worker serves, a replay that diverged, a
pause) are seen without looking for them: a gauge per reason, refreshed with the worker's other
run gauges, and the fleet view (``outlast fleet``) counting them per workflow with the way out."""

from __future__ import annotations

import json

from tests.conftest import World, wait_for
from tests.integration.test_metrics import free_port, scrape, value

APP = "tests.apps.observed:app"

# Runs of workflows this app does not serve (no worker of it claims or moves them): parked for
# each reason, and one that waits for a timer (not parked).
PARKED = (
    ("b1", "pay", "workflow_error"),
    ("b2", "pay", "workflow_error"),
    ("c1", "pay", "program_changed"),
    ("p1", "payouts", "paused"),
    ("d1", "payouts", "resume_impossible"),
    ("t1", "pay", "timer"),
)


def park(world: World) -> None:
    for rid, workflow, reason in PARKED:
        world.sql(
            "INSERT INTO runs (id, workflow, queue, input, input_hash, state, reason, wake_at) "
            "VALUES (%s, %s, 'default', '{}', 'h', 'waiting', %s, now() + interval '1 hour')",
            rid,
            workflow,
            reason,
        )


def test_the_parked_gauge_counts_parked_runs_by_reason(world: World) -> None:
    port = free_port()
    world.worker(APP, "--metrics-port", str(port))
    wait_for(lambda: scrape(port), what="the metrics endpoint")
    park(world)
    seen = wait_for(
        lambda: (s := scrape(port)) and value(s, "outlast_runs_parked", reason="workflow_error") == 2 and s,
        timeout=20,
        what="the parked gauge refreshed",
    )
    assert value(seen, "outlast_runs_parked", reason="program_changed") == 1
    assert value(seen, "outlast_runs_parked", reason="paused") == 1
    assert value(seen, "outlast_runs_parked", reason="resume_impossible") == 1
    assert value(seen, "outlast_runs_parked") == 5  # the timer's wait is not parked
    world.sql("UPDATE runs SET state = 'cancelled', finished_at = now() WHERE id IN ('b1', 'b2')")
    wait_for(
        lambda: (s := scrape(port)) and value(s, "outlast_runs_parked", reason="workflow_error") == 0,
        timeout=20,
        what="the gauge back to 0 once the parked runs are gone",
    )


def test_the_fleet_view_counts_parked_runs_per_workflow_with_the_way_out(world: World) -> None:
    park(world)
    shown = world.cli("fleet")
    assert shown.returncode == 0, shown.stderr
    rows = {tuple(ln.split()[:3]): ln for ln in shown.stdout.splitlines()}
    bug = rows[("pay", "workflow_error", "2")]
    assert bug.endswith("deploy a fix (its workers move them), or: outlast resume --workflow pay"), bug
    assert rows[("payouts", "paused", "1")].endswith("then: outlast unpause"), shown.stdout
    assert ("pay", "timer", "1") not in rows, shown.stdout
    as_json = json.loads(world.cli("fleet", "--json").stdout)["parked"]
    assert [(p["workflow"], p["reason"], p["runs"]) for p in as_json] == [
        ("pay", "program_changed", 1),
        ("pay", "workflow_error", 2),
        ("payouts", "paused", 1),
        ("payouts", "resume_impossible", 1),
    ]
