"""Refusals on resume, after a real crash: an altered journal, a changed program, and a program
that asks for something else than the journal holds. Each leaves the run intact (state
``waiting`` with the reason, an event saying why) and the world untouched."""

from __future__ import annotations

import pytest

from tests.conftest import World
from tests.crash import APP, APP_V2, bank_world, calls, journal, killed, last_message, rows, settled

pytestmark = pytest.mark.crash

PAY = {"amount": 5, "to": "bob"}


def crash_in_transfer(world: World, client: object, queues: dict[str, dict[str, object]]) -> dict[str, str]:
    """Enqueue one ``pay`` run per queue, each taken by a version-1 worker that dies right after
    the transfer's effect (its result not journaled). Returns queue -> run id."""
    from outlast import Client

    assert isinstance(client, Client)
    runs = {}
    armed = []
    for queue, input in queues.items():
        runs[queue] = client.enqueue("pay", input, queue=queue).id
        armed.append(world.worker(APP, "--queue", queue, OUTLAST_FAILPOINTS="after_effect:transfer"))
    for p in armed:
        killed(p)
    for rid in runs.values():
        kinds = [(k, op) for _s, k, op, _b in journal(world, rid)]
        assert kinds == [("result", "op-1"), ("intention", "op-2")]  # the read: its result only
        assert len(rows(world, "bank", rid)) == 1
        assert calls(world, rid) == {"balance": 1, "transfer": 1}
    return runs


@pytest.mark.parametrize("seq", [1, 2])
def test_altered_journal_is_refused(world: World, seq: int) -> None:
    with bank_world(world) as client:
        (rid,) = crash_in_transfer(world, client, {"q": PAY}).values()
        ok = world.cli("verify", rid)
        assert ok.returncode == 0 and "journal verifies (2 entries)" in ok.stdout, ok.stdout + ok.stderr

        # One byte of one entry changes while the run is interrupted (entry 1: the read's
        # arguments, in its result; entry 2: the transfer's amount, which a replay would otherwise
        # re-send).
        old, new = {1: ('"account":"bob"', '"account":"bod"'), 2: ('"amount":5', '"amount":6')}[seq]
        changed = world.sql(
            "UPDATE journal SET body = replace(body, %s, %s) WHERE run_id = %s AND seq = %s RETURNING body",
            old,
            new,
            rid,
            seq,
        )
        assert len(changed) == 1 and new in changed[0][0]

        world.worker(APP, "--queue", "q")
        run = settled(client, rid)
        assert (run.state, run.reason) == ("waiting", "journal_altered")
        assert f"journal altered at crossing #{seq}" in last_message(world, rid)
        # Refused before anything ran: no read, no transfer, no notification.
        assert calls(world, rid) == {"balance": 1, "transfer": 1}
        assert len(rows(world, "bank", rid)) == 1 and rows(world, "outbox", rid) == []

        bad = world.cli("verify", rid)
        assert bad.returncode != 0
        assert f"journal altered at crossing #{seq}" in bad.stderr
        shown = world.cli("status", rid)
        assert "waiting (journal_altered)" in shown.stdout
        assert f"ALTERED at crossing #{seq}" in shown.stdout

        # Resuming by hand does not get round it: refused again, still nothing done.
        again = world.cli("resume", rid)
        assert again.returncode == 0, again.stderr
        run = settled(client, rid)
        assert (run.state, run.reason) == ("waiting", "journal_altered")
        assert calls(world, rid) == {"balance": 1, "transfer": 1}


def test_program_change_between_crash_and_resume(world: World) -> None:
    variants = {"q-same": "", "q-reargued": "reargued", "q-reordered": "reordered"}
    with bank_world(world) as client:
        runs = crash_in_transfer(world, client, {q: {**PAY, "variant": v} for q, v in variants.items()})
        admitted = {q: client.status(rid).program for q, rid in runs.items()}

        # Version 2 of the program takes over: refused, the run left as it was.
        world.worker(APP_V2, *[a for q in variants for a in ("--queue", q)], OUTLAST_MOVE_PARKED="off")
        for q, rid in runs.items():
            run = settled(client, rid)
            assert (run.state, run.reason) == ("waiting", "program_changed"), f"{q}: {run.state} {run.reason}"
            assert "the program changed since this run started" in last_message(world, rid)
            assert run.program == admitted[q]
            assert calls(world, rid) == {"balance": 1, "transfer": 1}

        # The explicit migration: replay must still match.
        for rid in runs.values():
            moved = world.cli("resume", rid, "--accept-program-change")
            assert moved.returncode == 0, moved.stderr

        # The same call sequence: goes on, and the transfer still happened once.
        run = settled(client, runs["q-same"])
        assert run.state == "succeeded", f"{run.state} ({run.reason}) {run.error}"
        assert run.program != admitted["q-same"]
        (row,) = rows(world, "bank", runs["q-same"])
        assert run.result["receipt"]["id"] == row[0]
        assert len(rows(world, "outbox", runs["q-same"])) == 1
        assert calls(world, runs["q-same"]) == {"balance": 2, "transfer": 2, "notify": 1}

        # Other arguments, or another tool, where the journal has the transfer: impossible.
        journaled = 'transfer({"amount":5,"to":"bob"})'
        asks = {
            "q-reargued": 'transfer({"amount":6,"to":"bob"})',
            "q-reordered": 'notify({"msg":"sent 5 to bob"})',
        }
        for q, program in asks.items():
            rid = runs[q]
            run = settled(client, rid)
            assert (run.state, run.reason) == ("waiting", "resume_impossible"), f"{q}: {run.reason}"
            said = f"resume impossible at crossing #2: journal has {journaled}, program asks {program}"
            assert said in last_message(world, rid)
            shown = world.cli("status", rid)
            assert "waiting (resume_impossible)" in shown.stdout and "crossing #2" in shown.stdout
            # Nothing new reached the world: no second transfer, no notification.
            assert calls(world, rid) == {"balance": 1, "transfer": 1}
            assert len(rows(world, "bank", rid)) == 1 and rows(world, "outbox", rid) == []
