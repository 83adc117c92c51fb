"""A message's ``receive`` among the waits of ``run.first``, on real Postgres and Redis with a real
worker: won by a message (taken by the ``first`` entry's own statement, replayed the same on a
later resume), won by the timer, a message that arrives for a losing receive left in the inbox for
the next receive, and a send that commits while the run's wait is made is not lost.

The world is tests/apps/chat.py (``reply_or_timer``; ``handled`` counts the tool's effects)."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

from outlast import Client
from outlast.store import Store
from tests.apps import chat
from tests.conftest import World, wait_for
from tests.integration.test_messages import client, done, handled, held_run, journal
from tests.integration.test_waiting import reach, worker

__all__ = ["client"]  # the fixture


def firsts(world: World, run_id: str) -> list[dict[str, Any]]:
    return [d for k, _, d in journal(world, run_id) if k == "first"]


def taken(world: World, run_id: str) -> list[tuple[str, str | None]]:
    rows = world.sql("SELECT message_id, taken_op FROM messages WHERE run_id = %s ORDER BY seq", run_id)
    return [(m, op) for m, op in rows]


def test_a_message_wins_and_is_replayed_the_same(world: World, client: Client) -> None:
    run = client.enqueue("reply_or_timer", {"seconds": 3600, "then": True})
    with worker(world, chat.app):
        waiting = reach(client, run.id, "waiting")
        assert (waiting.reason, waiting.owner) == ("first", None)
        assert world.sql("SELECT waits_channels FROM runs WHERE id = %s", run.id) == [(["reply"],)]
        client.send(run.id, "reply", {"text": "hi"}, message_id="m-1")  # wakes the run at once
        wait_for(lambda: len(handled(world, run.id)) == 1, what="the winner acted on", timeout=10)
        reach(client, run.id, "waiting")  # on the next receive: the race is journaled
        client.send(run.id, "reply", "second", message_id="m-2")
        # the last resume replays the race from its entry: the same winner, the same value
        assert done(client, run.id) == {"kind": "message", "value": {"text": "hi"}, "then": "second"}
    (entry,) = firsts(world, run.id)
    assert (entry["won"], entry["won_kind"], entry["outcome"]["message_id"]) == (0, "message", "m-1")
    assert taken(world, run.id) == [("m-1", "op-3"), ("m-2", "op-5")]  # the first entry took m-1
    assert handled(world, run.id) == [{"kind": "message", "value": {"text": "hi"}}]  # acted on once


def test_the_timer_wins_and_a_later_message_goes_to_the_next_receive(world: World, client: Client) -> None:
    run = client.enqueue("reply_or_timer", {"seconds": 0.5, "then": True})
    with worker(world, chat.app):
        wait_for(lambda: len(handled(world, run.id)) == 1, what="the timer's win acted on", timeout=10)
        reach(client, run.id, "waiting")
        assert client.status(run.id).reason == "message"  # the next receive, alone
        client.send(run.id, "reply", "late", message_id="m-1")
        assert done(client, run.id) == {"kind": "timer", "value": None, "then": "late"}
    (entry,) = firsts(world, run.id)
    assert (entry["won"], entry["won_kind"]) == (1, "timer")
    assert taken(world, run.id) == [("m-1", "op-5")]


def test_a_message_for_a_losing_receive_stays_for_the_next_receive(world: World, client: Client) -> None:
    """Both are ready when the run looks (the timer is due at once, the message was sent before the
    run began): the timer, given first, wins; the receive that lost takes nothing."""
    run = client.enqueue("reply_or_timer", {"seconds": 0, "timer_first": True, "then": True})
    client.send(run.id, "reply", "early", message_id="m-1")
    with worker(world, chat.app):
        assert done(client, run.id) == {"kind": "timer", "value": None, "then": "early"}
    (entry,) = firsts(world, run.id)
    assert (entry["won"], entry["won_kind"]) == (0, "timer")
    assert taken(world, run.id) == [("m-1", "op-5")]  # taken by the next receive, not by the race


def test_a_receive_timeout_among_the_waits_is_a_durable_timer(world: World, client: Client) -> None:
    run = client.enqueue("reply_or_timer", {"seconds": 3600, "timeout": 0.3})
    with worker(world, chat.app):
        assert done(client, run.id) == {"kind": "message", "value": None, "then": None}
    kinds = [(k, op) for k, op, _ in journal(world, run.id)][:3]
    assert kinds == [("receive", "op-1"), ("timer", "op-2"), ("first", "op-3")]  # its due time, once
    (entry,) = firsts(world, run.id)
    assert (entry["won"], entry["outcome"]) == (0, {"channel": "reply", "timeout": True})
    with_messages = client.enqueue("reply_or_timer", {"seconds": 3600, "timeout": 3600})
    client.send(with_messages.id, "reply", "in time")
    with worker(world, chat.app):
        assert done(client, with_messages.id) == {"kind": "message", "value": "in time", "then": None}


def test_a_message_sent_just_before_the_wait_commits_is_taken(
    world: World, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real worker: a send commits after the run looked at its inbox and before its wait is
    sent. The wait is refused (the count moved), the worker looks again and the message wins."""
    from outlast.store.first import Firsts

    real, waits = Firsts.wait_first, []

    async def raced(self: Firsts, run_id: str, token: int, **kw: Any) -> bool:
        if not waits:
            with psycopg.connect(world.database_url, options=f"-c search_path={world.schema}") as c:
                c.execute("SELECT * FROM outlast_send(%s, 'reply', '\"raced\"'::jsonb, 'r-1')", (run_id,))
        committed = await real(self, run_id, token, **kw)
        waits.append(committed)
        return committed

    monkeypatch.setattr(Firsts, "wait_first", raced)
    run = client.enqueue("reply_or_timer", {"seconds": 3600})
    with worker(world, chat.app):
        assert done(client, run.id) == {"kind": "message", "value": "raced", "then": None}
    assert waits == [False]  # refused once; the second look found the message
    assert world.sql("SELECT fencing_token FROM runs WHERE id = %s", run.id) == [(1,)]  # one claim
    assert taken(world, run.id) == [("r-1", "op-3")]


def test_a_send_that_commits_while_the_first_wait_is_made_is_not_lost(world: World, client: Client) -> None:
    """The run looked at its inbox (nothing), then a send holds the run row while the run's wait
    on the first of a receive and a timer is sent: the wait blocks on it and is refused once it
    commits (the worker looks again). The other order: the wait first, then a send on one of its
    channels finds it waiting and wakes it; a send on another channel does not."""
    store = Store(world.database_url, world.schema, max_size=2)

    async def scene() -> None:
        await store.open()
        try:
            run_id, token = await held_run(client, store)
            look = await store.messages.inbox(run_id, token, "reply")
            assert look is not None and look["held"] and look["message_id"] is None
            seen = look["messages_sent"]

            def waiting(seen: int) -> Any:
                return store.firsts.wait_first(
                    run_id, token, state="waiting", wake_at=None, child=None,
                    detail={"reason": "first"}, channels=["reply"], seen=seen,
                )  # fmt: skip

            with psycopg.connect(world.database_url, options=f"-c search_path={world.schema}") as tx:
                tx.execute("SELECT * FROM outlast_send(%s, 'reply', '\"raced\"'::jsonb, 'r-1')", (run_id,))
                wait = asyncio.ensure_future(waiting(seen))
                await asyncio.sleep(0.5)
                assert not wait.done()  # blocked on the run row the send holds
                tx.commit()
            assert await wait is False  # refused: look again
            look = await store.messages.inbox(run_id, token, "reply")
            assert look is not None and look["message_id"] == "r-1"
            assert await waiting(look["messages_sent"])
            other = await store.messages.send_message(
                run_id, "other", 1, "o-1", max_bytes=None, max_waiting=10
            )
            assert other["queue"] is None  # not a channel it waits on
            sent = await store.messages.send_message(
                run_id, "reply", 2, "r-2", max_bytes=None, max_waiting=10
            )
            assert sent["queue"] == "default"
            assert world.sql("SELECT state, reason, wake_at IS NOT NULL FROM runs WHERE id = %s", run_id) == [
                ("waiting", "first", True)
            ]
        finally:
            await store.close()

    asyncio.run(scene())
