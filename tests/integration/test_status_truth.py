"""``outlast status`` and its neighbours tell the truth, through the real CLI and real workers:
the current reason only (not an older wait's), the waits of a ``first`` with their due times,
child runs in numeric order, ``attempts`` said for what it counts, ``runs`` in aligned columns,
an args hash's unique prefix taken (an ambiguous one refused asking for the whole hash), a send
to a channel nothing receives on warned about, and a worker that takes over a dead worker's run
saying it waits for the lease, and how long."""

from __future__ import annotations

import json
import re
import signal
from typing import Any

from tests.conftest import World, wait_for

APP = "tests.apps.telling:app"


def reached(world: World, run_id: str, state: str, reason: str | None = None) -> None:
    def there() -> bool:
        rows = world.sql("SELECT state, reason FROM runs WHERE id = %s", run_id)
        return bool(rows) and rows[0][0] == state and (reason is None or rows[0][1] == reason)

    wait_for(there, what=f"run {run_id} {state} ({reason})")


def status(world: World, run_id: str) -> str:
    p = world.cli("status", run_id)
    assert p.returncode == 0, p.stderr
    return p.stdout


def pending(world: World, run_id: str) -> list[dict[str, Any]]:
    info = json.loads(world.cli("status", run_id, "--json").stdout)
    return [a for a in info["approvals"] if a["status"] == "pending"]


def test_status_says_the_current_reason_and_a_prefix_of_the_hash_decides(world: World) -> None:
    world.worker(APP)
    assert world.cli("enqueue", "ask_then_approve", "--run-id", "talk-1").returncode == 0
    reached(world, "talk-1", "waiting", "message")
    shown = status(world, "talk-1")
    assert "why          waiting for a message on 'user'" in shown
    assert "attempts     0 (not taken since it last began waiting)" in shown

    heard = world.cli("send", "talk-1", "user", '"ship it"')
    assert heard.returncode == 0 and "warning" not in heard.stderr, heard.stderr  # it waited on 'user'
    reached(world, "talk-1", "awaiting_approval", "approval")
    [asked] = pending(world, "talk-1")
    shown = status(world, "talk-1")
    assert "waiting for a message on 'user'" not in shown, shown  # an older wait's reason
    assert (
        f"why          waiting for a decision on publish (approval {asked['op_id']}; approvers: ops)" in shown
    ), shown

    # A message on a channel the run never receives on, its workflow declaring none: kept, said.
    unheard = world.cli("send", "talk-1", "usr", '"typo"')
    assert unheard.returncode == 0 and "accepted at" in unheard.stdout, unheard.stderr
    assert unheard.stderr.startswith("warning: run talk-1 does not wait on 'usr' now"), unheard.stderr
    assert "declares no channels" in unheard.stderr

    wrong = world.cli(
        "approve", "talk-1", asked["op_id"], "--as", "ops", "--comment", "ok", "--args-hash", "0123abcd"
    )
    assert wrong.returncode == 1
    assert (
        "--args-hash 0123abcd is not the start of this request's hash; the full hash is needed"
        in wrong.stderr
    )
    prefix = asked["args_hash"][:8]
    ok = world.cli(
        "approve", "talk-1", asked["op_id"], "--as", "ops", "--comment", "ok", "--args-hash", prefix
    )
    assert ok.returncode == 0, ok.stderr
    reached(world, "talk-1", "succeeded")


def test_an_ambiguous_prefix_is_refused_asking_for_the_whole_hash(world: World) -> None:
    world.worker(APP)
    assert world.cli("enqueue", "twice", "--run-id", "two-1").returncode == 0
    reached(world, "two-1", "awaiting_approval", "first")
    first, second = pending(world, "two-1")
    assert first["args_hash"] == second["args_hash"]  # the same arguments
    prefix = first["args_hash"][:12]
    p = world.cli("approve", "two-1", first["op_id"], "--as", "ops", "--comment", "ok", "--args-hash", prefix)
    assert p.returncode == 1
    assert f"--args-hash {prefix} matches 2 pending requests' hashes; the full hash is needed" in p.stderr
    assert "altered" not in p.stderr
    whole = world.cli(
        "approve",
        "two-1",
        first["op_id"],
        "--as",
        "ops",
        "--comment",
        "ok",
        "--args-hash",
        first["args_hash"],
    )
    assert whole.returncode == 0, whole.stderr


def test_a_first_lists_its_waits_and_their_due_times(world: World) -> None:
    world.worker(APP)
    assert world.cli("enqueue", "either", "--run-id", "either-1").returncode == 0
    reached(world, "either-1", "waiting", "first")
    shown = status(world, "either-1")
    assert "why          waiting for the first of 2 waits (listed below)" in shown, shown
    waits = [line for line in shown.splitlines() if line.startswith("  waits on")]
    assert len(waits) == 2, shown
    stamp = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"
    assert re.fullmatch(rf"  waits on     op-\d+ a message on 'user', due {stamp}", waits[0]), waits
    assert re.fullmatch(rf"  waits on     op-\d+ a timer, due {stamp}", waits[1]), waits
    assert waits[0][-19:] < waits[1][-19:]  # the receive's timeout (1 h) before the timer (2 h)


def test_children_in_numeric_order_and_runs_aligned(world: World) -> None:
    world.worker(APP)
    assert world.cli("enqueue", "fan", "--run-id", "fan-1").returncode == 0
    reached(world, "fan-1", "waiting")
    wait_for(lambda: world.sql("SELECT count(*) FROM runs WHERE started_by = 'fan-1'")[0][0] == 11)
    shown = status(world, "fan-1")
    children = [line.split()[1] for line in shown.splitlines() if line.startswith("  child ")]
    assert len(children) == 11, shown
    numbers = [int(re.findall(r"\d+", c)[-1]) for c in children]
    assert numbers == sorted(numbers), children  # op-2 before op-10

    listed = world.cli("runs").stdout.splitlines()
    assert len(listed) == 12, listed
    starts = {line.index(" leaf ") if " leaf " in line else line.index(" fan ") for line in listed}
    assert len(starts) == 1, listed  # the workflow column starts at one place, long ids or short
    times = {re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", line).start() for line in listed}  # type: ignore[union-attr]
    assert len(times) == 1, listed


def test_a_worker_taking_over_says_it_waits_for_the_lease(world: World) -> None:
    workers = [world.worker(), world.worker()]
    wait_for(lambda: len(world.logged("worker.started")) == 2, what="two workers")
    assert world.cli("enqueue", "slow", "--input", '{"seconds": 60}', "--run-id", "orphan-1").returncode == 0
    [(started,)] = wait_for(lambda: world.sql("SELECT what FROM executions WHERE run_id = 'orphan-1'"))
    [owner] = [w for w in workers if started == f"start:{w.pid}"]
    owner.send_signal(signal.SIGKILL)
    owner.wait(10)
    [said] = wait_for(lambda: world.logged("run.waiting_for_lease", run_id="orphan-1"), what="the line")
    assert said["owner"] and 0 < said["seconds"] <= 2.0, said  # a lease (OUTLAST_LEASE_TTL) at most
    wait_for(lambda: world.sql("SELECT count(*) FROM executions WHERE run_id = 'orphan-1'")[0][0] == 2)
    assert len(world.logged("run.waiting_for_lease", run_id="orphan-1")) == 1  # said once
    status_now = status(world, "orphan-1")
    assert "attempts     2 (taken 2 times since it was queued or last waited)" in status_now, status_now
