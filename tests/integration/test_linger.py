"""A receive that lingers, on real Postgres and Redis: a run whose receive finds no message stays
held in its worker for ``OUTLAST_RECEIVE_LINGER`` seconds (outlast/worker/linger.py), woken by a
send, before it waits with no worker held.

A replay is counted in the world: each claim of a run raises its fencing token, and each wait
commits a ``waiting`` event. Workers run in-process (tests/integration/test_waiting.py's
``worker``); effects are counted in tests/apps/chat.py's tables.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from outlast import Client
from tests.apps import chat
from tests.conftest import World, wait_for
from tests.integration.test_messages import done, handled
from tests.integration.test_waiting import reach, worker


@pytest.fixture
def client(world: World, monkeypatch: pytest.MonkeyPatch) -> Iterator[Client]:
    monkeypatch.setenv("OUTLAST_DATABASE_URL", world.database_url)
    monkeypatch.setenv("OUTLAST_SCHEMA", world.schema)
    chat.setup(world.database_url, world.schema)
    with Client(settings=world.settings(), app=chat.app) as c:
        yield c


def claims(world: World, run_id: str) -> int:
    """How many times a worker claimed the run (and replayed its journal): its fencing token."""
    return int(world.sql("SELECT fencing_token FROM runs WHERE id = %s", run_id)[0][0])


def waits(world: World, run_id: str) -> int:
    return int(world.sql("SELECT count(*) FROM events WHERE run_id = %s AND kind = 'waiting'", run_id)[0][0])


def lingering(world: World, run_id: str) -> bool:
    """The run is held by a receive that lingers: running, and watched by its worker."""
    rows = world.sql(
        "SELECT r.state, EXISTS (SELECT 1 FROM watchers w WHERE w.run_id = r.id) FROM runs r WHERE r.id = %s",
        run_id,
    )
    return rows == [("running", True)]


def test_turns_sent_within_the_linger_are_taken_by_the_same_worker_with_no_replay(
    world: World, client: Client
) -> None:
    run = client.enqueue("converse", {"turns": 5})
    with worker(world, chat.app, receive_linger=20.0):
        for n in range(5):
            wait_for(lambda: lingering(world, run.id), what=f"the run lingering at turn {n}")
            client.send(run.id, "in", n)
            wait_for(lambda n=n: len(handled(world, run.id)) == n + 1, what=f"message {n} handled")
        assert done(client, run.id) == [0, 1, 2, 3, 4]
    assert (claims(world, run.id), waits(world, run.id)) == (1, 0)  # claimed once, never waited
    assert world.sql("SELECT count(*) FROM dispatches WHERE run_id = %s", run.id) == [(5,)]
    assert world.sql("SELECT count(*) FROM watchers") == [(0,)]  # each linger left its watch


def test_a_linger_longer_than_the_lease_keeps_the_run_held_by_its_worker(
    world: World, client: Client
) -> None:
    run = client.enqueue("converse", {"turns": 1})
    with worker(world, chat.app, receive_linger=8.0, lease_ttl=1.0):
        wait_for(lambda: lingering(world, run.id), what="the run lingering")
        time.sleep(3.0)  # three leases: renewed by the heartbeat, as for any run it holds
        assert lingering(world, run.id)
        client.send(run.id, "in", "after three leases")
        assert done(client, run.id) == ["after three leases"]
    assert (claims(world, run.id), waits(world, run.id)) == (1, 0)


def test_a_message_sent_after_the_linger_wakes_the_waiting_run_as_before(
    world: World, client: Client
) -> None:
    run = client.enqueue("converse", {"turns": 1})
    with worker(world, chat.app, receive_linger=0.3):
        waiting = reach(client, run.id, "waiting")
        assert (waiting.reason, waiting.waits_for, waiting.owner) == ("message", "in", None)
        client.send(run.id, "in", "late")
        assert done(client, run.id) == ["late"]
    assert (claims(world, run.id), waits(world, run.id)) == (2, 1)


def test_a_linger_of_zero_waits_at_once_and_opens_no_listening_connection(
    world: World, client: Client
) -> None:
    run = client.enqueue("converse", {"turns": 1})
    with worker(world, chat.app, receive_linger=0.0) as w:
        reach(client, run.id, "waiting", timeout=5)
        assert w.linger._listener is None  # nothing opened for it
        client.send(run.id, "in", "x")
        assert done(client, run.id) == ["x"]
    assert (claims(world, run.id), waits(world, run.id)) == (2, 1)


def test_a_stopping_worker_ends_a_linger_at_once_and_the_run_waits_with_nothing_lost(
    world: World, client: Client
) -> None:
    run = client.enqueue("converse", {"turns": 2})
    with worker(world, chat.app, receive_linger=30.0):
        wait_for(lambda: lingering(world, run.id), what="the run lingering")
        client.send(run.id, "in", "first")
        wait_for(lambda: len(handled(world, run.id)) == 1, what="the first message handled")
        wait_for(lambda: lingering(world, run.id), what="the run lingering again")
        stopping = time.monotonic()
    took = time.monotonic() - stopping
    # the wait committed as without a linger: not left to the grace (1s here), then released
    waiting = client.status(run.id)
    assert (waiting.state, waiting.reason, waiting.waits_for) == ("waiting", "message", "in")
    assert took < 3.0, f"the stop took {took:.2f}s with a linger of 30s"
    client.send(run.id, "in", "second")
    with worker(world, chat.app, receive_linger=30.0):
        assert done(client, run.id) == ["first", "second"]
    assert handled(world, run.id) == ["first", "second"]


def test_a_cancellation_ends_a_linger_at_once(world: World, client: Client) -> None:
    run = client.enqueue("converse", {"turns": 2})
    with worker(world, chat.app, receive_linger=30.0):
        wait_for(lambda: lingering(world, run.id), what="the run lingering")
        asked = time.monotonic()
        client.cancel(run.id)
        ended = reach(client, run.id, "cancelled", "failed", "succeeded", timeout=10)
        took = time.monotonic() - asked
    assert ended.state == "cancelled"
    assert took < 5.0, f"the cancellation took {took:.2f}s to end a linger of 30s"
    assert (claims(world, run.id), waits(world, run.id)) == (1, 0)


def test_many_runs_lingering_at_once_share_one_listening_connection_and_all_settle(
    world: World, client: Client
) -> None:
    runs = [client.enqueue("converse", {"turns": 1}) for _ in range(40)]
    with worker(world, chat.app, receive_linger=30.0, concurrency=50):
        # each join pauses the shared connection's reading; a reader that took the pause for a
        # lost connection left and joined again, and 40 at once never all settled
        wait_for(
            lambda: (
                world.sql("SELECT count(DISTINCT run_id), count(DISTINCT pid) FROM watchers") == [(40, 1)]
            ),
            timeout=15,
            what="40 runs lingering on one connection",
        )
        for r in runs:
            client.send(r.id, "in", r.id)
        for r in runs:
            assert done(client, r.id) == [r.id]
    assert {claims(world, r.id) for r in runs} == {1}


def test_a_lost_lease_ends_a_linger_at_once(world: World, client: Client) -> None:
    run = client.enqueue("converse", {"turns": 1})
    with worker(world, chat.app, receive_linger=30.0) as w:
        wait_for(lambda: lingering(world, run.id), what="the run lingering")
        world.sql("UPDATE runs SET fencing_token = fencing_token + 1 WHERE id = %s", run.id)  # taken over
        # the next heartbeat (a third of the 2s lease) finds the token moved: the run is let go
        wait_for(lambda: not w.active and world.sql("SELECT count(*) FROM watchers") == [(0,)], timeout=5)
