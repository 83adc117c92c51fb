"""The shared-commit writer's retries, with fakes for Postgres (no server needed).

Before a write is retried on a new connection, the server process of the dropped one is buried
(a transaction it still runs could commit after the retry looked for its effect): until it is
seen gone it stays to bury, whether a new connection fails meanwhile or the process is slow to go.
And a run's writes keep their order when a failed shared transaction is tried write by write."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

from outlast.errors import ServiceUnavailable
from outlast.store import lane as writer_module, writer as writer_module_w
from outlast.store.lane import _Write
from outlast.store.writer import Writer

DEAD = (4242, None)


class _Cursor:
    def __init__(self, row: Any) -> None:
        self._row = row

    async def fetchone(self) -> Any:
        return self._row


class _Conn:
    """A new connection: ``fails`` its first statement, or sees the dead process ``lingers``."""

    def __init__(self, fails: bool = False, lingers: bool = False) -> None:
        self.fails, self.lingers = fails, lingers
        self.closed = False
        self.asked = 0

    async def execute(self, sql: str, params: Any = None) -> _Cursor:
        if self.fails:
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        self.asked += 1
        running = sql.startswith("SELECT 1") and self.lingers
        return _Cursor((1,) if running else None)

    async def close(self) -> None:
        self.closed = True


class _Wire:
    def __init__(self, conn: Any) -> None:
        self.sent = 0

    def dump(self, sql: str, params: dict[str, Any]) -> Any:
        return type("D", (), {"size": 1})()

    async def transaction(self, batch: list[Any]) -> list[list[Any]]:
        self.sent += len(batch)
        return [[] for _ in batch]


def _writer(conns: list[_Conn], wires: list[_Wire]) -> Writer:
    async def connect() -> Any:
        return conns.pop(0)

    def make_wire(conn: Any) -> Any:
        wires.append(_Wire(conn))
        return wires[-1]

    w = Writer(connect, lambda exc: ServiceUnavailable(str(exc)), 1.0, make_wire=make_wire)
    w.lanes[0]._dead = DEAD
    return w


async def test_a_failed_burial_is_tried_again_by_the_next_connection() -> None:
    first, second = _Conn(fails=True), _Conn()
    wires: list[_Wire] = []
    w = _writer([first, second], wires)
    with pytest.raises(psycopg.OperationalError):
        await w.lanes[0]._run([_Write("SELECT 1", {}, "r")])
    assert w.lanes[0]._dead == DEAD, "the dead process was forgotten before it was seen gone"
    assert first.closed, "the connection that failed was left open"
    assert not wires
    assert await w.lanes[0]._run([_Write("SELECT 1", {}, "r")]) == [[]]
    assert w.lanes[0]._dead is None and second.asked >= 2  # terminated, then seen gone


async def test_no_write_goes_out_while_the_dead_process_still_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """However many looks it takes: the writer's bound (``STALL``) ends the wait, not a count."""
    real_sleep = asyncio.sleep

    async def quick(delay: float, result: Any = None) -> Any:
        return await real_sleep(0, result)

    monkeypatch.setattr(writer_module, "STALL", 0.5)
    monkeypatch.setattr(writer_module.asyncio, "sleep", quick)
    lingering = _Conn(lingers=True)
    wires: list[_Wire] = []
    w = _writer([lingering], wires)
    with pytest.raises(TimeoutError):
        await w.lanes[0]._run([_Write("SELECT 1", {}, "r")])
    assert lingering.asked > 100
    assert not wires, "a write went out while the dropped connection's process still ran"
    assert w.lanes[0]._dead == DEAD and lingering.closed


class _FlakyWire(_Wire):
    """A shared transaction fails once (a deadlock victim, say), and so does the first write's
    own first try: what is committed, in order, is kept in ``committed``."""

    def __init__(self, conn: Any) -> None:
        super().__init__(conn)
        self.committed: list[str] = []
        self.shared_fails, self.first_fails = 1, 1

    def dump(self, sql: str, params: dict[str, Any]) -> Any:
        return type("D", (), {"size": 1, "sql": sql})()

    async def transaction(self, batch: list[Any]) -> list[list[Any]]:
        if len(batch) > 1 and self.shared_fails:
            self.shared_fails -= 1
            raise psycopg.errors.DeadlockDetected("deadlock detected")
        if batch[0].sql == "first" and self.first_fails:
            self.first_fails -= 1
            raise psycopg.errors.DeadlockDetected("deadlock detected")
        self.committed += [d.sql for d in batch]
        return [[] for _ in batch]


class _LiveConn(_Conn):
    broken = False

    def __init__(self) -> None:
        super().__init__()
        self.pgconn = type("P", (), {"pipeline_status": writer_module.pq.PipelineStatus.OFF})()
        self.info = type("I", (), {"transaction_status": writer_module.TransactionStatus.IDLE})()


async def test_a_runs_writes_keep_their_order_when_one_is_retried() -> None:
    """Tried one by one after a shared transaction failed, a run's later write must not commit
    before its earlier one, retried (its journal entries would go out of order, and be refused)."""
    wires: list[_FlakyWire] = []

    async def connect() -> Any:
        return _LiveConn()

    def make_wire(conn: Any) -> Any:
        wires.append(_FlakyWire(conn))
        return wires[-1]

    w = Writer(connect, lambda exc: ServiceUnavailable(str(exc)), 5.0, make_wire=make_wire)
    await asyncio.gather(w.write("first", {}, key="run-1"), w.write("second", {}, key="run-1"))
    await w.close()
    assert wires[-1].committed == ["first", "second"]


class _GatedWire(_Wire):
    """Every transaction waits for its gate; what each lane sent, in order, is kept."""

    def __init__(self, conn: Any, log: list[tuple[int, str]], gates: dict[str, asyncio.Event]) -> None:
        super().__init__(conn)
        self.lane, self.log, self.gates = id(conn), log, gates

    def dump(self, sql: str, params: dict[str, Any]) -> Any:
        return type("D", (), {"size": 1, "sql": sql})()

    async def transaction(self, batch: list[Any]) -> list[list[Any]]:
        for d in batch:
            self.log.append((self.lane, d.sql))
        for d in batch:
            if d.sql in self.gates:
                await self.gates[d.sql].wait()
        return [[] for _ in batch]


def _lanes(n: int, log: list[tuple[int, str]], gates: dict[str, asyncio.Event]) -> Writer:
    async def connect() -> Any:
        return _LiveConn()

    return Writer(
        connect,
        lambda exc: ServiceUnavailable(str(exc)),
        5.0,
        make_wire=lambda conn: _GatedWire(conn, log, gates),
        in_flight=n,
    )


async def _until(cond: Any) -> None:
    for _ in range(200):
        if cond():
            return
        await asyncio.sleep(0)
    raise AssertionError("never happened")


async def test_a_second_lane_commits_other_runs_writes_while_the_first_is_in_flight() -> None:
    log: list[tuple[int, str]] = []
    gates = {"a1": asyncio.Event()}
    w = _lanes(2, log, gates)
    await w.write("warm", {})  # the first lane committed: the others join
    log.clear()
    a1 = asyncio.ensure_future(w.write("a1", {}, key="run-a"))
    await _until(lambda: len(log) == 1)
    # Enough writes of other runs for a batch beside a1 go out on the other lane while a1
    # waits; run-a's next one, queued among them, does not.
    a2 = asyncio.ensure_future(w.write("a2", {}, key="run-a"))
    others = [
        asyncio.ensure_future(w.write(f"b{i}", {}, key=f"run-b{i}"))
        for i in range(writer_module_w._SPLIT_FROM)
    ]
    await asyncio.gather(*others)
    sent = [sql for _, sql in log]
    assert "a2" not in sent, "run-a's later write went out beside its earlier one"
    assert len(sent) == 1 + len(others) and log[0][0] != log[1][0]
    assert not a1.done() and not a2.done()
    gates["a1"].set()
    await asyncio.gather(a1, a2)
    assert [sql for _, sql in log][-1] == "a2"
    await w.close()


async def test_a_few_writes_wait_for_the_transaction_in_flight_rather_than_take_a_lane() -> None:
    log: list[tuple[int, str]] = []
    gates = {"a1": asyncio.Event()}
    w = _lanes(2, log, gates)
    await w.write("warm", {})  # the first lane committed: the others join
    log.clear()
    a1 = asyncio.ensure_future(w.write("a1", {}, key="run-a"))
    await _until(lambda: len(log) == 1)
    b1 = asyncio.ensure_future(w.write("b1", {}, key="run-b"))
    await asyncio.sleep(0.01)
    assert [sql for _, sql in log] == ["a1"] and not b1.done()
    gates["a1"].set()
    await asyncio.gather(a1, b1)
    await w.close()


async def test_with_one_lane_a_batch_waits_for_the_one_in_flight() -> None:
    log: list[tuple[int, str]] = []
    gates = {"a1": asyncio.Event()}
    w = _lanes(1, log, gates)
    a1 = asyncio.ensure_future(w.write("a1", {}, key="run-a"))
    await _until(lambda: len(log) == 1)
    b1 = asyncio.ensure_future(w.write("b1", {}, key="run-b"))
    await asyncio.sleep(0.01)
    assert [sql for _, sql in log] == ["a1"] and not b1.done()
    gates["a1"].set()
    await asyncio.gather(a1, b1)
    await w.close()


async def test_a_lanes_failed_batch_is_retried_without_touching_the_other_lanes() -> None:
    """Lane one's shared transaction fails and is tried write by write (a deadlock victim);
    meanwhile lane two commits another run's writes, each once."""
    wires: list[_FlakyWire] = []

    async def connect() -> Any:
        return _LiveConn()

    def make_wire(conn: Any) -> Any:
        wires.append(_FlakyWire(conn))
        return wires[-1]

    w = Writer(connect, lambda exc: ServiceUnavailable(str(exc)), 5.0, make_wire=make_wire, in_flight=2)
    first = [w.write("first", {}, key="run-1"), w.write("second", {}, key="run-1")]
    others = [w.write(f"other-{i}", {}, key=f"run-{i + 2}") for i in range(5)]
    await asyncio.gather(*first, *others)
    await w.close()
    committed = [sql for wire in wires for sql in wire.committed]
    assert sorted(committed) == sorted(["first", "second"] + [f"other-{i}" for i in range(5)])
    assert committed.index("first") < committed.index("second")


async def test_a_hurried_writer_retries_nothing() -> None:
    """A worker past its grace period hurries its writer: the write being retried (Postgres gone,
    ``retry_for`` 60 s) fails now, and so does a later one at its first failure."""

    async def connect() -> Any:
        raise psycopg.OperationalError("connection refused")

    w = Writer(connect, lambda exc: ServiceUnavailable(str(exc)), 60.0)
    first = w.submit("first", {}, key="run-1")
    await asyncio.sleep(0.3)  # a few tries, then the backoff
    assert not first.done()
    w.hurry()
    with pytest.raises(ServiceUnavailable):
        await asyncio.wait_for(first, 1.0)
    with pytest.raises(ServiceUnavailable):
        await asyncio.wait_for(w.write("second", {}, key="run-2"), 1.0)
    await w.close()
