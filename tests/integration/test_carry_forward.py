"""A run carried forward (``run.carry_forward``), on real Postgres and Redis with a real worker: a
chat that loops receive → act → reply and carries forward every few turns keeps one run id for
its messages, state and events; messages sent while it carries (many, at once) are each acted on
once; its current journal stays short; the ended generations stay readable and verify, one by
one, until pruned.

Counted in the world (tests/apps/chat.py: ``handled``, one row per idempotency key; ``dispatches``)
and in the ``messages``, ``journal``, ``journal_past`` and ``generations`` rows.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from outlast import Client
from outlast.errors import InvalidInput
from tests.apps import chat
from tests.conftest import World
from tests.integration.test_waiting import reach, worker

EVERY, TOTAL = 4, 40


@pytest.fixture
def client(world: World, monkeypatch: pytest.MonkeyPatch) -> Iterator[Client]:
    monkeypatch.setenv("OUTLAST_DATABASE_URL", world.database_url)
    monkeypatch.setenv("OUTLAST_SCHEMA", world.schema)
    chat.setup(world.database_url, world.schema)
    with Client(settings=world.settings(), app=chat.app) as c:
        yield c


def acted_on(world: World, run_id: str) -> list[int]:
    """The message numbers the run acted on, one row per effect (a message taken twice shows twice)."""
    return [n for (n,) in world.sql("SELECT n FROM handled WHERE run_id = %s ORDER BY n", run_id)]


def test_a_chat_carried_forward_keeps_its_id_and_loses_or_doubles_no_message(
    world: World, client: Client
) -> None:
    run_id = client.enqueue("chatter", {"every": EVERY, "total": TOTAL}).id
    with worker(world, chat.app):
        reach(client, run_id, "waiting")

        def send(n: int) -> None:
            client.send(run_id, "in", {"n": n}, message_id=f"m-{n}")

        with ThreadPoolExecutor(8) as pool:  # sent while the run takes, acts and carries forward
            list(pool.map(send, range(TOTAL)))
        run = reach(client, run_id, "succeeded", "failed", timeout=60)
    assert run.state == "succeeded", run.reason
    assert run.result == {"done": TOTAL}
    assert acted_on(world, run_id) == list(range(TOTAL))  # each message acted on once, none lost
    assert world.sql("SELECT count(*) FROM dispatches WHERE run_id = %s", run_id) == [(TOTAL,)]
    taken = world.sql("SELECT taken_op FROM messages WHERE run_id = %s AND taken_op IS NOT NULL", run_id)
    assert len(taken) == len(set(taken)) == TOTAL  # each taken once, by an operation of its own
    # one run id, whatever the generation: its state, its events
    assert run.generation == TOTAL // EVERY
    assert client.state(run_id, "turns").value == TOTAL
    events = client.events(run_id)
    turns = [e["detail"]["data"]["n"] for e in events if e["kind"] == "custom:turn"]
    assert sorted(turns) == list(range(TOTAL))
    carried = [e["detail"]["generation"] for e in events if e["kind"] == "carried_forward"]
    assert carried == list(range(1, TOTAL // EVERY + 1))
    # the current journal is short (the last generation returned at once); the earlier ones kept
    assert world.sql("SELECT count(*) FROM journal WHERE run_id = %s", run_id) == [(0,)]
    kept = client.generations(run_id)
    assert [g["generation"] for g in kept] == list(range(TOTAL // EVERY + 1))
    assert {g["journal_len"] for g in kept[:-1]} == {EVERY * 5}  # message, intention, result, state, event
    assert [g["input"]["done"] for g in kept[1:]] == list(range(EVERY, TOTAL + 1, EVERY))
    # operation ids go on across generations: no idempotency key is made twice
    ops = world.sql("SELECT op_id FROM journal_past WHERE run_id = %s AND kind = 'intention'", run_id)
    assert len(ops) == len(set(ops)) == TOTAL


def test_the_ended_generations_are_read_verified_and_pruned(world: World, client: Client) -> None:
    run_id = client.enqueue("chatter", {"every": 2, "total": 4}).id
    for n in range(4):
        client.send(run_id, "in", {"n": n})
    with worker(world, chat.app):
        run = reach(client, run_id, "succeeded", "failed", timeout=30)
    assert (run.state, run.generation) == ("succeeded", 2)
    first = client.journal(run_id, 0)
    assert [e.kind for e in first][:2] == ["message", "intention"]
    assert first[0].data["payload"] == {"n": 0}
    verified = world.cli("verify", run_id)
    assert verified.returncode == 0, verified.stderr
    assert verified.stdout.splitlines() == [
        f"run {run_id}: generation 0 journal verifies (10 entries)",
        f"run {run_id}: generation 1 journal verifies (10 entries)",
        f"run {run_id}: generation 2 journal verifies (0 entries)",
    ]
    shown = world.cli("status", run_id, "--generation", "1")
    assert shown.returncode == 0, shown.stderr
    assert "generation   1 (ended; the current one is 2" in shown.stdout
    as_json = json.loads(world.cli("status", run_id, "--generation", "0", "--json").stdout)
    assert as_json["chain"] == {
        "head": client.generations(run_id)[0]["journal_head"],
        "entries": 10,
        "verifies": True,
        "bad": None,
        "generation": 0,
        "current": 2,
    }
    # an entry of an ended generation altered: verify names the generation and the crossing
    world.sql(
        "UPDATE journal_past SET body = replace(body, '\"n\":1', '\"n\":7') "
        "WHERE run_id = %s AND generation = 0 AND seq = 6",
        run_id,
    )
    altered = world.cli("verify", run_id)
    assert altered.returncode == 1
    assert f"run {run_id}: generation 0 journal altered at crossing #6" in altered.stderr
    # retention: generations ended before the cutoff go, the run's current one stays
    world.sql("UPDATE generations SET carried_at = carried_at - interval '2 days' WHERE run_id = %s", run_id)
    client.prune(86400)
    assert world.sql("SELECT count(*) FROM journal_past WHERE run_id = %s", run_id) == [(0,)]
    assert [g["generation"] for g in client.generations(run_id)] == [2]
    with pytest.raises(InvalidInput, match="has no generation 0 kept"):
        client.journal(run_id, 0)
