"""A worker killed on the reference paths of a run's own columns and messages: a large RESULT stored
in the payload store before the run's row refers to it (``after_payload_stored``), a large
MESSAGE taken by an entry that refers to the payload its row holds (``after_take``), and a large
INPUT read back at the claim by a worker that dies before its first crossing (``before_intention``).
Each time another worker takes the run over; counted in Postgres: the run's payload rows, its
journal, its messages, and its outcome.

(A value stored and journaled by reference: tests/crash/test_payloads_crash.py.)"""

from __future__ import annotations

import time
from typing import Any

import pytest

from outlast import Client
from tests.apps.payloads import text_of
from tests.conftest import World, wait_for
from tests.crash import journal, killed, settled
from tests.crash.test_payloads_crash import APP, GRACE, SMALL, payloads

pytestmark = pytest.mark.crash

SIZE = 100_000
INPUT_SIZE = 600_000  # read back in slices (of 256 KiB at least)


def column_ref(world: World, column: str, run_id: str) -> str | None:
    """The SHA-256 the run's ``input`` or ``result`` column holds by reference (None: inline)."""
    found = world.sql(f"SELECT {column}->'$refs'->'{column}'->>'sha256' FROM runs WHERE id = %s", run_id)
    return found[0][0] if found else None


def test_killed_between_storing_a_large_result_and_its_row_referring_to_it(world: World) -> None:
    client = Client(settings=world.settings())
    try:
        rid = client.enqueue("big_fresh_result", {"size": SIZE}).id
        killed(world.worker(APP, OUTLAST_FAILPOINTS="after_payload_stored", **SMALL))
        orphan = payloads(world, rid)
        assert len(orphan) == 1 and column_ref(world, "result", rid) is None  # stored, not referred to
        assert client.status(rid).state != "succeeded"

        world.worker(APP, **SMALL)  # the default grace (an hour): its sweeps keep the orphan
        run = settled(client, rid)
        assert run.state == "succeeded"
        held = column_ref(world, "result", rid)
        assert held is not None and held not in orphan  # the attempt that ended stored its own text
        assert payloads(world, rid) == sorted([*orphan, held])
        ended = world.sql("SELECT count(*) FROM events WHERE run_id = %s AND kind = 'succeeded'", rid)
        assert ended == [(1,)], world.sql("SELECT kind FROM events WHERE run_id = %s", rid)  # ended once

        time.sleep(GRACE + 0.5)  # the orphan is past the grace: a worker's first sweep deletes it
        world.worker(APP, OUTLAST_PAYLOAD_GRACE=str(GRACE), **SMALL)
        wait_for(lambda: payloads(world, rid) == [held], 30, 0.2, "the orphan swept, the result kept")
        text = client.status(rid).result["text"]  # read back whole, checked against its SHA-256
        assert len(text) == SIZE and text == text_of(text[:32], SIZE)
    finally:
        client.close()


def test_killed_after_taking_a_large_message(world: World) -> None:
    client = Client(settings=world.settings(max_payload=4096))
    try:
        rid = client.enqueue("inbox").id
        client.send(rid, "in", {"text": text_of("m", SIZE)})
        sent = world.sql("SELECT payload->'$refs'->'payload'->>'sha256' FROM messages WHERE run_id = %s", rid)
        assert len(sent) == 1 and sent[0][0] is not None  # the message's row holds a reference
        sha = sent[0][0]
        killed(world.worker(APP, OUTLAST_FAILPOINTS="after_take:in", **SMALL))
        taken = [body for _, kind, _, body in journal(world, rid) if kind == "message"]
        assert len(taken) == 1, taken  # journaled, then killed before the workflow had it
        assert taken[0]["$refs"]["payload"]["sha256"] == sha  # the take refers to the row's payload
        assert "payload" not in taken[0]

        world.worker(APP, **SMALL)
        run = settled(client, rid)
        assert run.state == "succeeded", run
        assert run.result == {"length": SIZE, "same": 1, "told": 100}  # the replay read it whole
        assert [b for _, k, _, b in journal(world, rid) if k == "message"] == taken  # taken once
        assert world.sql("SELECT count(*) FROM messages WHERE run_id = %s AND taken_op IS NOT NULL", rid) == [
            (1,)
        ]
        assert payloads(world, rid) == [sha]  # stored once, by its sender
        world.sweep_payloads()  # no grace: kept, as the take's entry and the message refer to it
        assert payloads(world, rid) == [sha]
        assert client.verify(rid) is None
    finally:
        client.close()


def test_a_large_input_read_at_the_claim_by_a_worker_that_dies(world: World) -> None:
    client = Client(settings=world.settings(max_payload=4096))
    try:
        rid = client.enqueue("big_input", {"text": text_of("i", INPUT_SIZE)}).id
        sha = column_ref(world, "input", rid)
        assert sha is not None and payloads(world, rid) == [sha]
        killed(world.worker(APP, OUTLAST_FAILPOINTS="before_intention:note", **SMALL))
        assert journal(world, rid) == []  # it read the input, then died before its first crossing

        world.worker(APP, **SMALL)
        run = settled(client, rid)
        assert run.state == "succeeded", run
        assert run.result == {"length": INPUT_SIZE, "same": 1, "told": 100}
        notes: list[Any] = [b for _, k, op, b in journal(world, rid) if k == "result"]
        assert len(notes) == 1, notes  # the second worker's call, once
        assert payloads(world, rid) == [sha] and column_ref(world, "input", rid) == sha
        world.sweep_payloads()  # no grace: kept, as the run refers to it
        assert payloads(world, rid) == [sha]
        assert client.status(rid).input == {"text": text_of("i", INPUT_SIZE)}
    finally:
        client.close()
