"""Messages into a run, on real Postgres and Redis: ``receive`` and ``send``, the durable wait on a
channel, the take (one fenced statement with its journal entry), duplicates, order, timeouts, typed
channels, refusals, the race between a send and a wait, ``outlast_send`` in a transaction that
commits or rolls back, and pruning.

Workers run in-process (tests/integration/test_waiting.py's ``worker``); what runs did is counted
in the world (tests/apps/chat.py: ``handled``, ``dispatches``), in the journal and in the
``messages`` rows.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from outlast import Client
from outlast.errors import InvalidInput, MessageRefused
from outlast.store import Store
from tests.apps import chat
from tests.conftest import World, wait_for
from tests.integration.test_waiting import reach, worker


@pytest.fixture
def client(world: World, monkeypatch: pytest.MonkeyPatch) -> Iterator[Client]:
    monkeypatch.setenv("OUTLAST_DATABASE_URL", world.database_url)
    monkeypatch.setenv("OUTLAST_SCHEMA", world.schema)
    chat.setup(world.database_url, world.schema)
    with Client(settings=world.settings(), app=chat.app) as c:
        yield c


def journal(world: World, run_id: str) -> list[tuple[str, str, dict[str, Any]]]:
    rows = world.sql("SELECT kind, op_id, body FROM journal WHERE run_id = %s ORDER BY seq", run_id)
    return [(k, op, json.loads(b)) for k, op, b in rows]


def handled(world: World, run_id: str) -> list[Any]:
    return [m for (m,) in world.sql("SELECT message FROM handled WHERE run_id = %s ORDER BY n", run_id)]


def done(c: Client, run_id: str, timeout: float = 20.0) -> Any:
    run = reach(c, run_id, "succeeded", "failed", timeout=timeout)
    assert run.state == "succeeded", run.error
    return run.result


def test_a_waiting_run_holds_no_worker_and_a_send_wakes_it(world: World, client: Client) -> None:
    run = client.enqueue("converse", {"turns": 2})
    with worker(world, chat.app):
        waiting = reach(client, run.id, "waiting")
        assert (waiting.reason, waiting.waits_for, waiting.owner) == ("message", "in", None)
        events = [e for e in client.events(run.id) if e["kind"] == "waiting"]
        assert events[-1]["detail"]["channel"] == "in"
        first = client.send(run.id, "in", {"text": "hello"})
        assert (first.seq, first.duplicate) == (1, False)
        wait_for(lambda: len(handled(world, run.id)) == 1, what="the first message handled")
        reach(client, run.id, "waiting")
        client.send(run.id, "in", {"text": "again"})
        assert done(client, run.id) == [{"text": "hello"}, {"text": "again"}]
    # resumed after the first, the run was served it from its journal: each handled once
    assert handled(world, run.id) == [{"text": "hello"}, {"text": "again"}]
    taken = [(d["message_id"], d["payload"]) for k, _, d in journal(world, run.id) if k == "message"]
    assert [p for _, p in taken] == [{"text": "hello"}, {"text": "again"}]
    rows = client.messages(run.id)
    assert [(r["taken_op"], r["taken_seq"] is not None) for r in rows] == [("op-1", True), ("op-3", True)]


def test_a_message_sent_before_the_run_waits_is_kept_and_taken_in_order(world: World, client: Client) -> None:
    run = client.enqueue("converse", {"turns": 5})
    for n in range(5):
        client.send(run.id, "in", n)
    assert client.status(run.id).state == "queued"  # nothing runs it yet: the messages wait
    with worker(world, chat.app):
        assert done(client, run.id) == [0, 1, 2, 3, 4]
    assert world.sql("SELECT count(*) FROM dispatches WHERE run_id = %s", run.id) == [(5,)]


def test_the_same_message_id_twice_is_one_message(world: World, client: Client) -> None:
    run = client.enqueue("converse", {"turns": 2})
    a = client.send(run.id, "in", "one", message_id="m-1")
    again = client.send(run.id, "in", "one", message_id="m-1")
    assert again.duplicate and (again.seq, again.message_id, again.sent_at) == (
        a.seq,
        a.message_id,
        a.sent_at,
    )
    client.send(run.id, "in", "two", message_id="m-2")
    assert world.sql("SELECT count(*) FROM messages WHERE run_id = %s", run.id) == [(2,)]
    with worker(world, chat.app):
        assert done(client, run.id) == ["one", "two"]
    # after it was taken, and after the run ended, a retry still gets the receipt
    assert client.send(run.id, "in", "one", message_id="m-1").duplicate


def test_channels_are_separate_inboxes(world: World, client: Client) -> None:
    run = client.enqueue("two")
    client.send(run.id, "a", "on a")
    with worker(world, chat.app):
        reach(client, run.id, "waiting")
        assert client.status(run.id).waits_for == "b"
        client.send(run.id, "b", "on b")
        assert done(client, run.id) == ["on b", "on a"]


def test_a_timeout_is_a_durable_timer(world: World, client: Client) -> None:
    late = client.enqueue("patient", {"timeout": 0.5})
    sent = client.enqueue("patient", {"timeout": 30})
    with worker(world, chat.app):
        assert done(client, late.id) == {"got": None}
        reach(client, sent.id, "waiting")
        client.send(sent.id, "in", "in time")
        assert done(client, sent.id) == {"got": "in time"}
    kinds = [(k, d.get("timeout")) for k, _, d in journal(world, late.id)]
    assert kinds == [("receive", None), ("message", True)]


def test_typed_channels_validate_before_storing(world: World, client: Client) -> None:
    run = client.enqueue("support")
    with pytest.raises(
        InvalidInput, match=rf"run '{run.id}', channel 'reply': the payload is not a valid Reply"
    ):
        client.send(run.id, "reply", {"score": 3})
    with pytest.raises(InvalidInput, match=rf"run '{run.id}', channel 'other': unknown channel"):
        client.send(run.id, "other", {"text": "x"})
    with pytest.raises(InvalidInput, match="channel 'count'"):
        client.send(run.id, "count", "many")
    assert world.sql("SELECT count(*) FROM messages") == [(0,)]
    client.send(run.id, "reply", chat.Reply(text="thanks", score=5))
    client.send(run.id, "count", "7")  # validated (lax) and stored as the type's JSON
    assert world.sql("SELECT payload FROM messages WHERE channel = 'count'") == [(7,)]
    with worker(world, chat.app):
        assert done(client, run.id) == {"text": "thanks", "score": 5, "count": 7}


def test_refusals_name_the_run_and_the_channel_and_store_nothing(world: World, client: Client) -> None:
    with pytest.raises(MessageRefused, match=r"run 'nope', channel 'in': no such run; nothing stored") as e:
        client.send("nope", "in", 1)
    assert e.value.refusal == "unknown"
    ended = client.enqueue("patient", {"timeout": 0})
    with worker(world, chat.app):
        done(client, ended.id)
    with pytest.raises(MessageRefused, match=rf"run '{ended.id}', channel 'in': the run is succeeded"):
        client.send(ended.id, "in", 1)
    run = client.enqueue("converse", {"turns": 1})
    with Client(
        settings=world.settings(max_inbox=2, max_payload=1024, max_referenced=1500), app=chat.app
    ) as small:
        with pytest.raises(InvalidInput, match=rf"run '{run.id}', channel 'in': the payload is refused"):
            small.send(run.id, "in", "x" * 2000, message_id="big")
        small.send(run.id, "in", 1)
        small.send(run.id, "in", 2)
        with pytest.raises(
            MessageRefused, match=rf"run '{run.id}', channel 'in': 2 messages already wait"
        ) as e:
            small.send(run.id, "in", 3)
        assert e.value.refusal == "full"
    assert world.sql("SELECT count(*) FROM messages") == [(2,)]


# -- the store's statements, interleaved by hand ----------------------------------------------


async def held_run(client: Client, store: Store) -> tuple[str, int]:
    """A run claimed by a worker of this test's own: its id and fencing token."""
    run = client.enqueue("converse", {"turns": 1})
    claimed = await store.leases.claim(run.id, "w", 30.0, chat.app.programs())
    assert claimed is not None
    return run.id, claimed.run.fencing_token


def test_a_send_that_commits_while_the_wait_is_made_is_not_lost(world: World, client: Client) -> None:
    """A send committed between the worker's look at the inbox and its wait: the wait finds the run
    row changed and is refused (the worker looks again). Here the send holds the run row, not yet
    committed, while the wait is sent: the wait blocks on it and is refused once it commits."""
    store = Store(world.database_url, world.schema, max_size=2)

    async def scene() -> None:
        await store.open()
        try:
            run_id, token = await held_run(client, store)
            look = await store.messages.inbox(run_id, token, "in")
            assert look is not None and look["held"] and look["message_id"] is None
            seen = look["messages_sent"]
            with psycopg.connect(world.database_url, options=f"-c search_path={world.schema}") as tx:
                tx.execute("SELECT * FROM outlast_send(%s, 'in', '\"raced\"'::jsonb, 'r-1')", (run_id,))
                wait = asyncio.ensure_future(store.messages.await_message(run_id, token, "in", seen, None))
                await asyncio.sleep(0.5)
                assert not wait.done()  # blocked on the run row the send holds
                tx.commit()
            assert await wait is False  # refused: look again
            look = await store.messages.inbox(run_id, token, "in")
            assert look is not None and look["message_id"] == "r-1"
            # and the other order: the wait first, then a send finds the run waiting and wakes it
            assert await store.messages.await_message(run_id, token, "other", look["messages_sent"], None)
            sent = await store.messages.send_message(
                run_id, "other", 1, "o-1", max_bytes=None, max_waiting=10
            )
            assert sent["queue"] == "default"
            assert world.sql("SELECT state, wake_at IS NOT NULL FROM runs WHERE id = %s", run_id) == [
                ("waiting", True)
            ]
        finally:
            await store.close()

    asyncio.run(scene())


def test_a_stale_worker_cannot_take_a_message(world: World, client: Client) -> None:
    from outlast._journal import make_entry

    store = Store(world.database_url, world.schema, max_size=2)

    async def scene() -> None:
        await store.open()
        try:
            run_id, token = await held_run(client, store)
            client.send(run_id, "in", "mine", message_id="x")
            run = await store.runs.get_run(run_id)
            assert run is not None
            entry = make_entry(run.journal_head, run.journal_len + 1, "message", "op-1", {"channel": "in"})
            assert (
                await store.messages.submit_take(run_id, token - 1, entry, [], "x", 0) == []
            )  # an older token
            assert world.sql("SELECT taken_seq FROM messages WHERE run_id = %s", run_id) == [(None,)]
            assert await store.messages.submit_take(run_id, token, entry, [], "x", 0) != []
            assert (
                await store.messages.submit_take(run_id, token, entry, [], "x", 0) != []
            )  # sent again: found
            assert world.sql("SELECT taken_seq, taken_op FROM messages WHERE run_id = %s", run_id) == [
                (1, "op-1")
            ]
            assert world.sql("SELECT messages_waiting FROM runs WHERE id = %s", run_id) == [(0,)]
        finally:
            await store.close()

    asyncio.run(scene())


def test_sends_racing_a_worker_lose_no_wake_up(world: World, client: Client) -> None:
    """Sends at every moment of a run's cycle of takes and waits: every message is taken."""
    runs = [client.enqueue("converse", {"turns": 15}) for _ in range(4)]
    with worker(world, chat.app):

        def producer(run_id: str) -> None:
            with Client(settings=world.settings(), app=chat.app) as c:
                for n in range(15):
                    c.send(run_id, "in", n)

        threads = [threading.Thread(target=producer, args=(r.id,)) for r in runs]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        for r in runs:
            assert done(client, r.id, timeout=60) == list(range(15))


# -- outlast_send: the producer's own transaction --------------------------------------------


def test_outlast_send_wakes_the_run_only_if_the_transaction_commits(world: World, client: Client) -> None:
    run = client.enqueue("converse", {"turns": 1})
    with worker(world, chat.app):
        reach(client, run.id, "waiting")
        with psycopg.connect(world.database_url, options=f"-c search_path={world.schema}") as tx:
            tx.execute("INSERT INTO executions (run_id, what) VALUES (%s, 'order')", (run.id,))
            tx.execute("SELECT * FROM outlast_send(%s, 'in', '{\"order\": 1}'::jsonb, 'o-1')", (run.id,))
            tx.rollback()
        assert world.sql("SELECT count(*) FROM messages") == [(0,)]
        assert world.sql("SELECT wake_at FROM runs WHERE id = %s", run.id) == [(None,)]
        assert client.status(run.id).state == "waiting"
        with psycopg.connect(world.database_url, options=f"-c search_path={world.schema}") as tx:
            tx.execute("INSERT INTO executions (run_id, what) VALUES (%s, 'order')", (run.id,))
            row = tx.execute(
                "SELECT * FROM outlast_send(%s, 'in', '{\"order\": 2}'::jsonb, 'o-2')", (run.id,)
            ).fetchone()
            assert row is not None and row[0] == "o-2" and row[3] is False
            tx.commit()
        assert done(client, run.id) == [{"order": 2}]  # published by the sweeper
    with psycopg.connect(world.database_url, options=f"-c search_path={world.schema}") as c:
        with pytest.raises(psycopg.errors.CheckViolation, match=rf"run '{run.id}', channel 'in': the run is"):
            c.execute("SELECT * FROM outlast_send(%s, 'in', '1'::jsonb)", (run.id,))


def test_messages_are_pruned_with_their_run(world: World, client: Client) -> None:
    run = client.enqueue("patient", {"timeout": 0})
    client.send(run.id, "other", "never taken")
    with worker(world, chat.app):
        done(client, run.id)
    assert client.messages(run.id)[0]["taken_op"] is None
    time.sleep(0.2)
    client.prune(0.1)
    assert world.sql("SELECT count(*) FROM messages WHERE run_id = %s", run.id) == [(0,)]


def test_the_cli_sends_and_status_shows_what_waits_untaken(world: World, client: Client) -> None:
    run = client.enqueue("converse", {"turns": 1})
    sent = world.cli("send", run.id, "later", '{"n": 1}', "--id", "c-1")
    assert sent.returncode == 0, sent.stderr
    assert f"run {run.id}: message c-1 #1 on 'later' accepted at" in sent.stdout
    again = world.cli("send", run.id, "later", '{"n": 1}', "--id", "c-1")
    assert "already sent" in again.stdout
    shown = world.cli("status", run.id)
    assert "message      #1 on 'later' id c-1 sent" in shown.stdout and "not taken" in shown.stdout
    refused = world.cli("send", "nope", "in", "1")
    assert refused.returncode == 1
    assert refused.stderr.strip() == "outlast: error: run 'nope', channel 'in': no such run; nothing stored"
    bad = world.cli("send", run.id, "in", "{not json")
    assert bad.returncode == 2 and "not valid JSON" in bad.stderr
    typed = client.enqueue("support")
    checked = world.cli("send", typed.id, "reply", '{"score": 1}', "--app", "tests.apps.chat:app")
    assert checked.returncode == 2, checked.stdout
    assert f"run '{typed.id}', channel 'reply': the payload is not a valid Reply" in checked.stderr
    assert (
        world.cli("send", typed.id, "reply", '{"text": "ok"}', "--app", "tests.apps.chat:app").returncode == 0
    )


def test_the_bundle_carries_the_messages_a_run_took_and_replays_offline(world: World, client: Client) -> None:
    from outlast.testing.replay import assert_replays

    run = client.enqueue("converse", {"turns": 3})
    for n in range(3):
        client.send(run.id, "in", {"n": n})
    client.send(run.id, "later", "never taken")
    with worker(world, chat.app):
        done(client, run.id)
    out = world.tmp / "bundle"
    exported = world.cli("export", run.id, "-o", str(out))
    assert exported.returncode == 0, exported.stderr
    lines = (out / "journal.jsonl").read_text().splitlines()
    assert [json.loads(line)["payload"] for line in lines if json.loads(line)["kind"] == "message"] == [
        {"n": 0},
        {"n": 1},
        {"n": 2},
    ]
    assert json.loads((out / "last_state.json").read_text())["messages"][0]["channel"] == "later"
    assert_replays(out, chat.app)  # served from the journal: no inbox, no database


def test_a_run_waiting_on_a_message_can_be_cancelled(world: World, client: Client) -> None:
    run = client.enqueue("converse", {"turns": 1})
    with worker(world, chat.app):
        reach(client, run.id, "waiting")
        client.cancel(run.id)
        assert reach(client, run.id, "cancelled").state == "cancelled"
    with pytest.raises(MessageRefused, match="the run is cancelled"):
        client.send(run.id, "in", "too late")


def test_receives_made_in_parallel_take_a_message_each(world: World, client: Client) -> None:
    early = client.enqueue("pair")
    client.send(early.id, "in", 1)
    client.send(early.id, "in", 2)
    late = client.enqueue("pair")
    with worker(world, chat.app):
        assert sorted(done(client, early.id)) == [1, 2]
        assert client.status(early.id).fencing_token == 1  # both in one claim: no take refused
        reach(client, late.id, "waiting")
        client.send(late.id, "in", 3)
        wait_for(lambda: client.status(late.id).state == "waiting", what="the second receive to wait")
        client.send(late.id, "in", 4)
        assert sorted(done(client, late.id)) == [3, 4]
    assert world.sql("SELECT count(*) FROM messages WHERE taken_seq IS NULL") == [(0,)]
