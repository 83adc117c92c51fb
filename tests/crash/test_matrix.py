"""The crash-point matrix: every failpoint by every kind of tool, on real worker processes.

For one failpoint, each tool kind gets its own queue and its own armed worker, which runs the
``step`` workflow (a read, the tool under test, a read) and kills itself at that point. Then one
unarmed worker serving every queue takes the five runs over once their leases expire. The
assertions are on the world the tools act on (bank rows, outbox rows, posts, call counters).

The armed workers hold a read's or an idempotent tool's result until the run's next write
(``OUTLAST_HOLD_MS`` a minute): a held result dies with its worker, and is redone (a read) or
dispatched again with its key (an idempotent tool). A read has no intention: its
``before_intention`` and ``after_intention`` are one point, as are a held result's
``after_result`` and ``with_result_held``.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from outlast import Client
from outlast._model import RunRecord
from tests.conftest import World, wait_for
from tests.crash import APP, bank_world, calls, journal, killed, last_message, rows, settled, streams_drained

pytestmark = pytest.mark.crash

POINTS = ["before_intention", "after_intention", "after_effect", "after_result", "before_ack", "after_final"]

# kind -> (tool, its arguments, the table its effect lands in)
KINDS: dict[str, tuple[str, dict[str, Any], str | None]] = {
    "read": ("lookup", {"ref": "invoice-7"}, None),
    "idempotent": ("transfer", {"amount": 5, "to": "bob"}, "bank"),
    "reconciled": ("notify", {"msg": "sent 5 to bob"}, "outbox"),
    "reconciler_raises": ("notify_flaky", {"msg": "sent 5 to bob"}, "outbox"),
    "plain": ("post", {"text": "paid bob"}, "posts"),
}

TOOL_RAN_BEFORE_CRASH = {"after_effect", "after_result", "before_ack", "after_final"}
GAP = {"after_intention", "after_effect"}  # an intention without a result is left behind
HELD = {"read", "idempotent"}  # kinds whose result is held until the run's next write
HOLD_LONG = {"OUTLAST_HOLD_MS": "60000"}  # held results are written only by the next write


def journal_at_crash(point: str, kind: str) -> list[tuple[str, str]] | None:
    """(kind, operation) of what the armed worker left journaled; None: the run had ended."""
    if point in ("before_ack", "after_final"):
        return None
    if kind == "read":
        return []  # the first read's result was held (a read journals no intention): lost
    if point == "before_intention":
        # An idempotent tool's intention would have carried the held read: lost. Any other tool
        # has it written before it goes live.
        return [] if kind in HELD else [("result", "op-1")]
    left = [("result", "op-1"), ("intention", "op-2")]  # written before (or with) the intention
    if point == "after_result" and kind not in HELD:
        left.append(("result", "op-2"))
    return left


def first_read_lost(point: str, kind: str) -> bool:
    return journal_at_crash(point, kind) == []


def stored_item(world: World, kind: str, run_id: str) -> Any:
    """What the world holds for the run's one effect, in the shape the tool returns it."""
    table = KINDS[kind][2]
    if table is None:
        return None
    found = rows(world, table, run_id)
    assert len(found) == 1, f"{kind}: {len(found)} rows in {table}, expected exactly one"
    row = found[0]
    if table == "bank":
        return {"id": row[0], "key": row[1], "amount": row[4], "to": row[5]}
    if table == "outbox":
        return {"message_id": row[1], "id": row[0]}
    return {"post": row[0]}


def check_at_crash(world: World, client: Client, point: str, kind: str, rid: str) -> None:
    """What the world and the journal hold when the armed worker is dead."""
    tool, _args, table = KINDS[kind]
    n = 1 if point in TOOL_RAN_BEFORE_CRASH else 0
    assert calls(world, rid).get(tool, 0) == n, f"{kind}: {tool} calls before the takeover"
    if table is not None:
        assert len(rows(world, table, rid)) == n, f"{kind}: effects before the takeover"
    kinds = [(k, op) for _seq, k, op, _body in journal(world, rid)]
    expected = journal_at_crash(point, kind)
    if expected is None:  # the run ended before the worker died
        assert client.status(rid).state == "succeeded"
    else:
        assert kinds == expected, f"{kind} at {point}: {kinds}"


def resolve_in_doubt(
    world: World, client: Client, point: str, kind: str, rid: str, run: RunRecord
) -> RunRecord:
    """A plain tool (or one whose reconciler cannot tell) across a gap: at most once, declared.
    The run waits for a person; their answer is acted on, and the tool runs at most once."""
    tool, _args, table = KINDS[kind]
    assert table is not None
    assert (run.state, run.reason) == ("waiting", "in_doubt"), f"{kind}: {run.state} {run.reason}"
    assert calls(world, rid).get(tool, 0) == (1 if point == "after_effect" else 0), "run again across a gap"
    assert len(rows(world, table, rid)) == (1 if point == "after_effect" else 0)
    assert f"operation op-2 ({tool}) is in doubt" in last_message(world, rid)
    entries = journal(world, rid)
    assert [(k, op) for _s, k, op, _b in entries][-2:] == [("intention", "op-2"), ("in_doubt", "op-2")]
    if kind == "reconciler_raises":
        assert calls(world, rid)["reconcile:notify_flaky"] == 1
        assert "mailer unreachable" in entries[-1][3]["why"]
    shown = world.cli("status", rid)
    assert shown.returncode == 0, shown.stderr
    assert "waiting (in_doubt)" in shown.stdout
    assert re.search(rf"in doubt\s+op-2 {tool} ", shown.stdout), shown.stdout

    if point == "after_effect":  # it did happen: say so, with what it returned
        said = stored_item(world, kind, rid)
        how = ["--executed", "--result", json.dumps(said)]
    else:  # it did not happen: it runs once
        how = ["--not-executed"]
    done = world.cli("resolve", rid, "op-2", *how)
    assert done.returncode == 0, done.stderr
    run = settled(client, rid)
    assert run.state == "succeeded", f"{kind} after resolve: {run.state} ({run.reason})"
    if point == "after_effect":
        assert run.result["done"] == said
        assert calls(world, rid)[tool] == 1, "resolved as executed, yet the tool ran again"
    else:
        assert calls(world, rid)[tool] == 1, "resolved as not executed: it runs exactly once"
    return run


def check_end(world: World, client: Client, point: str, kind: str, rid: str, run: RunRecord) -> None:
    """The world once the run succeeded."""
    tool, _args, table = KINDS[kind]
    n = calls(world, rid)
    # Replay: the read journaled before the crash was never called again (one held and lost with
    # its worker was redone); the one after ran once.
    reads = 3 if first_read_lost(point, kind) else 2
    assert n["balance"] == reads, f"{kind}: balance called {n['balance']} times, not {reads}"
    # Exactly once for every effect (at most once, then resolved, for the plain tool) ...
    item = stored_item(world, kind, rid)
    if table is not None:
        # ... and the run reports that one stored item (seed 004's window: killed after the
        # commit, before the engine finished, the replay returns the same item, one row).
        assert run.result["done"] == item, f"{kind}: {run.result['done']} != {item}"
    # Dispatches: a read and an idempotent tool are dispatched again across a gap whose effect
    # may have happened, or when their result was held and lost; nothing else ever is.
    again = point in ("after_effect", "after_result") and kind in HELD
    assert n[tool] == (2 if again else 1), f"{kind}: {tool} dispatched {n[tool]} times"
    asked = point in GAP and kind in ("reconciled", "reconciler_raises")
    assert n.get(f"reconcile:{tool}", 0) == (1 if asked else 0), f"{kind}: reconciler calls"
    if point in GAP and kind == "reconciled":
        body = next(b for _s, k, op, b in journal(world, rid) if (k, op) == ("result", "op-2"))
        expected = "reconciler: executed" if point == "after_effect" else "reconciler: not executed"
        assert body["how"] == expected
    assert client.wait(rid, timeout=5).result == run.result  # asking again runs nothing
    if journal_at_crash(point, kind):
        assert world.logged("run.resumed", run_id=rid)


@pytest.mark.parametrize("point", POINTS)
def test_crash_point(world: World, point: str) -> None:
    with bank_world(world) as client:
        runs: dict[str, str] = {}
        for kind, (tool, args, _table) in KINDS.items():
            runs[kind] = client.enqueue("step", {"tool": tool, "args": args}, queue=f"q-{kind}").id
            spec = point if point in ("before_ack", "after_final") else f"{point}:{tool}"
            world.worker(APP, "--queue", f"q-{kind}", OUTLAST_FAILPOINTS=spec, **HOLD_LONG)
        for p in list(world.procs):
            killed(p)
        for kind, rid in runs.items():
            check_at_crash(world, client, point, kind, rid)

        # A fresh worker takes the five runs over once their leases expire.
        world.worker(APP, *[a for kind in KINDS for a in ("--queue", f"q-{kind}")])
        for kind, rid in runs.items():
            run = settled(client, rid)
            if point in GAP and kind in ("plain", "reconciler_raises"):
                run = resolve_in_doubt(world, client, point, kind, rid, run)
            assert run.state == "succeeded", f"{kind}: {run.state} ({run.reason}) {run.error}"
            check_end(world, client, point, kind, rid, run)
        streams_drained(world, [f"q-{kind}" for kind in KINDS])


def test_reconciled_tool_killed_twice(world: World) -> None:
    """The reconciler says "not executed", the tool runs again and the worker dies right after
    its effect: the next worker asks the reconciler again (it now says executed), it does not
    send a second time on the strength of the first answer."""
    with bank_world(world) as client:
        rid = client.enqueue("step", {"tool": "notify", "args": {"msg": "hello"}}, queue="q").id
        killed(world.worker(APP, "--queue", "q", OUTLAST_FAILPOINTS="after_intention:notify"))
        assert rows(world, "outbox", rid) == []
        killed(world.worker(APP, "--queue", "q", OUTLAST_FAILPOINTS="after_effect:notify"))
        assert len(rows(world, "outbox", rid)) == 1
        assert calls(world, rid) == {"balance": 1, "notify": 1, "reconcile:notify": 1}

        world.worker(APP, "--queue", "q")
        run = settled(client, rid)
        assert run.state == "succeeded", f"{run.state} ({run.reason}) {run.error}"
        assert run.result["done"] == stored_item(world, "reconciled", rid)
        assert calls(world, rid) == {"balance": 2, "notify": 1, "reconcile:notify": 2}


def test_not_executed_resolution_then_crash_stays_at_most_once(world: World) -> None:
    """An operator says a plain tool did not happen; it runs once and the worker dies right after
    its effect. The next worker must not run it a second time on the strength of that answer:
    the operation is in doubt again."""
    with bank_world(world) as client:
        rid = client.enqueue("step", {"tool": "post", "args": {"text": "hi"}}, queue="q").id
        killed(world.worker(APP, "--queue", "q", OUTLAST_FAILPOINTS="after_intention:post"))
        world.worker(APP, "--queue", "q", OUTLAST_FAILPOINTS="after_effect:post")
        run = settled(client, rid)
        assert (run.state, run.reason) == ("waiting", "in_doubt")
        assert rows(world, "posts", rid) == []
        assert world.cli("resolve", rid, "op-2", "--not-executed").returncode == 0
        killed(world.procs[-1])  # it took the run back, ran the post once, and died
        assert len(rows(world, "posts", rid)) == 1

        world.worker(APP, "--queue", "q")
        wait_for(
            lambda: client.status(rid).reason == "in_doubt" and client.status(rid).journal_len > 5,
            60,
            0.2,
            "the operation to be in doubt again",
        )
        assert len(rows(world, "posts", rid)) == 1  # at most once, declared
        kinds = [k for _s, k, op, _b in journal(world, rid) if op == "op-2"]
        assert kinds == ["intention", "in_doubt", "resolution", "redispatch", "in_doubt"]
        said = stored_item(world, "plain", rid)
        assert world.cli("resolve", rid, "op-2", "--executed", "--result", json.dumps(said)).returncode == 0
        run = settled(client, rid)
        assert run.state == "succeeded" and len(rows(world, "posts", rid)) == 1
