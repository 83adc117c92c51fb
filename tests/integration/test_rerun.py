"""Every step is safe to re-run: a write whose commit's acknowledgement was lost is sent again by
the writer, and the statement finds its own effect instead of being refused or taking effect twice.

The loss is injected in the writer's wire: the transaction carrying the statement commits, then its
connection breaks before the writer hears of it. The writer drops the connection, waits for its
server process to be gone, and sends the same statement with the same parameters (the same bytes)
on a new one. Each test checks that the loss happened, that the caller is told what the first
commit said, and that the world holds one effect."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest

from outlast._journal import make_entry
from outlast.store import OnWait, Store
from outlast.store.queries import Q
from outlast.store.wire import Dumped, Row, Wire
from tests.conftest import World


@dataclass
class Lost:
    """What the lost commit returned for the statement (empty until the loss happened)."""

    first: list[list[Row]] = field(default_factory=list)


@contextmanager
def ack_lost(monkeypatch: pytest.MonkeyPatch, name: str) -> Iterator[Lost]:
    """The next transaction that carries statement ``name`` commits; then its connection breaks
    before the writer reads the acknowledgement."""
    real = Wire.transaction
    lost = Lost()

    async def transaction(self: Wire, batch: list[Dumped]) -> list[list[Row]]:
        out = await real(self, batch)
        mine = [i for i, d in enumerate(batch[: len(out)]) if d.sql == Q[name]]
        if mine and not lost.first:
            lost.first.append(out[mine[0]])
            await self.conn.close()
            raise psycopg.OperationalError("server closed the connection unexpectedly (injected)")
        return out

    with monkeypatch.context() as m:
        m.setattr(Wire, "transaction", transaction)
        yield lost
    assert lost.first, f"no transaction carried {name}: no acknowledgement was lost"


async def opened(world: World) -> Store:
    s = Store(world.database_url, world.schema)
    await s.open()
    return s


async def claimed(store: Store, run_id: str, budget: dict[str, float] | None = None) -> int:
    await store.runs.insert_run(
        id=run_id,
        workflow="w",
        queue="default",
        input={},
        input_hash="h",
        program=None,
        deadline_in=None,
        budget=budget,
    )
    got = await store.leases.claim(run_id, "me", 30, {"w": "v1"})
    assert got is not None
    return got[0].fencing_token


def budget(world: World) -> list[tuple[Any, ...]]:
    return world.sql("SELECT name, spent::float8, reserved::float8 FROM budgets ORDER BY name")


def events(world: World, run_id: str, kind: str) -> int:
    return int(world.sql("SELECT count(*) FROM events WHERE run_id = %s AND kind = %s", run_id, kind)[0][0])


@pytest.mark.parametrize("reserved", [True, False], ids=["expected", "unexpected"])
async def test_settle_sent_again_spends_once(
    world: World, monkeypatch: pytest.MonkeyPatch, reserved: bool
) -> None:
    """With a reservation to replace (``expected``) and without one (an operation that charged
    what it never estimated): settled, and spent once."""
    store = await opened(world)
    try:
        await claimed(store, "r", budget={"usd": 10.0})
        if reserved:
            assert await store.budgets.reserve("r", "r", "op-1", {"usd": 2.0}) == []
        with ack_lost(monkeypatch, "settle") as lost:
            assert await store.budgets.settle("r", "r", "op-1", {"usd": 3.0}, expected=reserved)
        assert lost.first == [[{"run_id": "r"}]]
        assert budget(world) == [("usd", 3.0, 0.0)]
        assert world.sql("SELECT count(*) FROM reservations") == [(0,)]
        # Settled once per operation: its settle sent later, by anyone, spends nothing more.
        assert await store.budgets.settle("r", "r", "op-1", {"usd": 3.0}, expected=reserved)
        assert budget(world) == [("usd", 3.0, 0.0)]
        # Another operation is settled on its own.
        assert await store.budgets.settle("r", "r", "op-2", {"usd": 1.0}, expected=False)
        assert budget(world) == [("usd", 4.0, 0.0)]
    finally:
        await store.close()


async def test_settle_of_a_settled_operation_releases_a_reservation_made_since(world: World) -> None:
    """A reservation found beside the operation's settlement (made again after it) is released,
    never left held, and nothing more is spent."""
    store = await opened(world)
    try:
        await claimed(store, "r", budget={"usd": 10.0})
        assert await store.budgets.settle("r", "r", "op-1", {"usd": 3.0}, expected=False)
        assert await store.budgets.reserve("r", "r", "op-1", {"usd": 2.0}) == []
        assert budget(world) == [("usd", 3.0, 2.0)]
        assert await store.budgets.settle("r", "r", "op-1", {"usd": 3.0}, expected=True)
        assert budget(world) == [("usd", 3.0, 0.0)]
        # An expected settle with nothing reserved and nothing settled: nothing to settle.
        assert not await store.budgets.settle("r", "r", "op-9", {"usd": 1.0}, expected=True)
        assert budget(world) == [("usd", 3.0, 0.0)]
    finally:
        await store.close()


@pytest.mark.parametrize("cancel", [False, True], ids=["queued", "cancelling"])
async def test_release_sent_again_hands_over_once(
    world: World, monkeypatch: pytest.MonkeyPatch, cancel: bool
) -> None:
    """Handed over once: queued (or cancelling, when a cancellation was requested), one event,
    the claim not counted as a crash twice."""
    store = await opened(world)
    try:
        token = await claimed(store, "r")
        if cancel:
            assert await store.runs.cancel("r", {"by": "test"}) == ("running", "default")
        with ack_lost(monkeypatch, "release") as lost:
            assert await store.leases.release("r", token, "worker shutting down")
        assert lost.first == [[{"run_id": "r"}]]
        state = "cancelling" if cancel else "queued"
        assert world.sql("SELECT state, owner, lease_expires_at, attempts FROM runs WHERE id = 'r'") == [
            (state, None, None, 0)
        ]
        assert events(world, "r", "handed_over") == 1
        assert not await store.leases.release("r", token - 1, "a stale worker")  # refused, still
    finally:
        await store.close()


async def test_requeue_sent_again_resumes_once(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """Resumed once: queued, one event; a resume of a wait the run has left is refused."""
    store = await opened(world)
    try:
        token = await claimed(store, "r")
        assert await store.leases.wait("r", token, "in_doubt", "op-1 in doubt")
        with ack_lost(monkeypatch, "requeue") as lost:
            assert await store.leases.requeue("r", token, False, {"was": "in_doubt"})
        assert lost.first == [[{"run_id": "r"}]]
        assert world.sql("SELECT state, reason FROM runs WHERE id = 'r'") == [("queued", None)]
        assert events(world, "r", "resumed") == 1
        # Claimed and waiting again: that is another wait, not the one the operator resumed.
        again = await store.leases.claim("r", "me", 30, {"w": "v1"})
        assert again is not None and again[0].fencing_token == token + 1
        assert await store.leases.wait("r", token + 1, "in_doubt", "op-2 in doubt")
        assert not await store.leases.requeue("r", token, False, {"was": "in_doubt"})
        assert world.sql("SELECT state FROM runs WHERE id = 'r'") == [("waiting",)]
    finally:
        await store.close()


async def test_decide_sent_again_decides_once_and_names_the_queue(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Decided once, one event, and the caller told the run's queue (to publish the woken run);
    another decision is still refused."""
    store = await opened(world)
    try:
        token = await claimed(store, "r")
        assert await store.approvals.await_approval(
            "r",
            token,
            "op-1",
            action="pay",
            args={},
            args_hash="h",
            policy_version="1",
            approvers=["ann"],
            expires_in=None,
        )
        who = {"name": "ann", "how": "declared"}
        with ack_lost(monkeypatch, "decide") as lost:
            got = await store.approvals.decide("r", "op-1", "approved", "ann", "fine", None, who)
        assert lost.first == [[{"run_id": "r", "queue": "default"}]]
        assert got == (True, "default")
        assert world.sql("SELECT status, decided_by FROM approvals") == [("approved", "ann")]
        assert world.sql("SELECT state FROM runs WHERE id = 'r'") == [("queued",)]
        assert events(world, "r", "decision") == 1
        assert await store.approvals.decide("r", "op-1", "rejected", "ann", "no", None, who) == (False, None)
    finally:
        await store.close()


async def test_an_event_sent_again_is_added_once(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """One event, and the caller told its id; the same event added by another call is another."""
    store = await opened(world)
    try:
        await claimed(store, "r")
        with ack_lost(monkeypatch, "add_event") as lost:
            event_id = await store.runs.event("r", "throttled", {"waits_for": "a slot of k"})
        assert lost.first == [[{"id": event_id}]]
        assert events(world, "r", "throttled") == 1
        assert await store.runs.event("r", "throttled", {"waits_for": "a slot of k"}) != event_id
        assert events(world, "r", "throttled") == 2
        assert await store.runs.event("missing", "throttled", {}) is None
    finally:
        await store.close()


async def test_a_resolution_sent_again_is_journaled_once(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An operator's entry (an in-doubt resolution) on a run no worker holds: journaled once, and
    the caller told it was (not that the run changed meanwhile); another resolution of the same
    crossing, chained to the same head, is still refused."""
    store = await opened(world)
    try:
        token = await claimed(store, "r")
        intention = make_entry("", 1, "intention", "op-1", {"tool": "pay", "args": {}, "args_hash": "h"})
        assert await store.journal.append("r", token, intention) is False
        assert await store.leases.wait("r", token, "in_doubt", "op-1 in doubt")
        said = {"how": "operator", "executed": False}
        resolution = make_entry(intention.hash, 2, "resolution", "op-1", said)
        with ack_lost(monkeypatch, "append_unowned") as lost:
            assert await store.journal.append("r", OnWait("in_doubt", intention.hash), resolution) is False
        assert lost.first == [[{"seq": 2, "cancel_requested": False}]]
        assert world.sql("SELECT count(*) FROM journal WHERE run_id = 'r'") == [(2,)]
        assert world.sql("SELECT state, journal_len FROM runs WHERE id = 'r'") == [("queued", 2)]
        other = make_entry(intention.hash, 2, "resolution", "op-1", {"how": "operator", "executed": True})
        assert await store.journal.append("r", OnWait("in_doubt", intention.hash), other) is None
    finally:
        await store.close()


async def test_an_approval_request_sent_again_waits_once(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Waiting for the decision once, one request, one event; the worker told the wait is
    committed (not that another worker holds the run: it would log a lost lease)."""
    store = await opened(world)
    try:
        token = await claimed(store, "r")
        asked: dict[str, Any] = {"action": "pay", "args": {}, "args_hash": "h", "policy_version": "1"}
        with ack_lost(monkeypatch, "await_approval") as lost:
            assert await store.approvals.await_approval(
                "r", token, "op-1", **asked, approvers=["ann"], expires_in=None
            )
        assert lost.first == [[{"run_id": "r"}]]
        assert world.sql("SELECT state, reason FROM runs WHERE id = 'r'") == [
            ("awaiting_approval", "approval")
        ]
        assert world.sql("SELECT count(*) FROM approvals") == [(1,)]
        assert events(world, "r", "awaiting_approval") == 1
        assert not await store.approvals.await_approval(
            "r", token - 1, "op-1", **asked, approvers=["ann"], expires_in=None
        )
    finally:
        await store.close()


@pytest.mark.parametrize("started", [True, False], ids=["running", "never-started"])
async def test_cancel_sent_again_requests_once(
    world: World, monkeypatch: pytest.MonkeyPatch, started: bool
) -> None:
    """Requested once, one event, and the caller told what the run is now: still running (the
    worker stops it), or cancelled at once (never started), not that it finished meanwhile."""
    store = await opened(world)
    try:
        if started:
            await claimed(store, "r")
        else:
            run = {"workflow": "w", "queue": "default", "input": {}, "input_hash": "h"}
            await store.runs.insert_run(id="r", **run, program=None, deadline_in=None)
        state = "running" if started else "cancelled"
        with ack_lost(monkeypatch, "cancel") as lost:
            assert await store.runs.cancel("r", {"by": "test"}) == (state, "default")
        assert lost.first == [[{"id": "r", "state": state, "queue": "default"}]]
        assert world.sql("SELECT state, cancel_requested FROM runs WHERE id = 'r'") == [(state, True)]
        assert events(world, "r", "cancel_requested") == 1
        # Another request is another: recorded while the run is unfinished, refused once final.
        assert await store.runs.cancel("r", {"by": "test"}) == ((state, "default") if started else None)
        assert events(world, "r", "cancel_requested") == (2 if started else 1)
    finally:
        await store.close()


async def test_a_dead_letter_requeue_sent_again_requeues_once(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stamped once, one event, and the caller told where to publish the run; a run final since
    is told as final (its letter dropped)."""
    store = await opened(world)
    try:
        token = await claimed(store, "r")
        detail = {"dead_letter": "1-0", "queue": "default", "reason": "poison"}
        with ack_lost(monkeypatch, "requeue_dead_letter") as lost:
            assert await store.runs.requeue_dead_letter("r", detail) == ("default", "running", "normal")
        assert lost.first == [[{"queue": "default", "state": "running", "priority": "normal"}]]
        assert events(world, "r", "requeued") == 1
        assert await store.leases.finish("r", token, "succeeded", 0)
        assert await store.runs.requeue_dead_letter("r", detail) is None
        assert events(world, "r", "requeued") == 1
    finally:
        await store.close()
