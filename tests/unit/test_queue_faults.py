"""The queue under faults: poison stream entries, deleted pending entries, consumer names, Redis
losing its data or going away. fakeredis, with a bytes client as in production; the Lua part
(``forget_consumers``) runs against the real Redis and is skipped when none is reachable."""

from __future__ import annotations

import asyncio
import os
import re
import unicodedata
import uuid
from collections.abc import AsyncIterator
from typing import Any

import fakeredis
import pytest
import redis.asyncio as aioredis

from outlast.errors import ServiceUnavailable
from outlast.queue import MAX_RUN_ID, Delivery, Queue

Q = "default"


def _queue() -> Queue:
    return Queue("redis://fake", "t", client=fakeredis.FakeAsyncRedis())


@pytest.fixture
def queue() -> Queue:
    return _queue()


async def _add_raw(q: Queue, fields: dict[bytes, bytes], queue: str = Q) -> str:
    flat = [x for kv in fields.items() for x in kv]
    entry: bytes = await q.redis.execute_command("XADD", q.stream(queue), "*", *flat)
    return entry.decode()


def _expected_run(fields: dict[bytes, bytes]) -> str | None:
    """What a worker may serve, written out independently of the queue's own check."""
    try:
        run = {k.decode(): v.decode() for k, v in fields.items()}.get("run")
    except UnicodeDecodeError:
        return None
    if not run or len(run) > MAX_RUN_ID or any(unicodedata.category(c) == "Cc" for c in run):
        return None
    return run


# -- poison entries ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({b"run": b"\xff\xfe"}, "not UTF-8"),
        ({b"\xc3": b"r1"}, "not UTF-8"),
        ({b"junk": b"1"}, "no 'run' field"),
        ({b"run": b""}, "empty run id"),
        ({b"run": b"a\x00b"}, "NUL or control characters"),
        ({b"run": b"a\nb"}, "NUL or control characters"),
        ({b"run": b"a\xc2\x85b"}, "NUL or control characters"),  # U+0085, a C1 control
        ({b"run": b"x" * (MAX_RUN_ID + 1)}, f"longer than {MAX_RUN_ID}"),
    ],
)
async def test_a_malformed_entry_comes_back_with_its_problem(
    queue: Queue, fields: dict[bytes, bytes], problem: str
) -> None:
    await queue.ensure_group(Q)
    bad = await _add_raw(queue, fields)
    await queue.publish(Q, "r1")
    first, second = await queue.read(Q, "c1", 10, 10)
    assert first.entry_id == bad and first.run_id is None
    assert first.problem is not None and problem in first.problem
    assert (second.run_id, second.problem) == ("r1", None)  # the batch is not held up

    await queue.dead_letter(first, first.problem)
    await queue.ack(second)
    (dead,) = await queue.dead_letters(Q)
    assert dead["_reason"] == first.problem and dead["_entry"] == bad
    assert await queue.redis.xlen(queue.stream(Q)) == 0
    assert (await queue.redis.xpending(queue.stream(Q), "workers"))["pending"] == 0


async def test_the_dead_letter_of_an_entry_not_utf8_keeps_its_bytes(queue: Queue) -> None:
    await queue.ensure_group(Q)
    await _add_raw(queue, {b"run": b"\xff\x00", b"\xfe": b"x"})
    (d,) = await queue.read(Q, "c1", 10, 10)
    await queue.dead_letter(d, d.problem or "")
    (dead,) = await queue.dead_letters(Q)
    assert dead["_raw"] == repr({b"run": b"\xff\x00", b"\xfe": b"x"})
    assert dead["run"] == "\\xff\x00" and dead["_reason"] == "entry is not UTF-8"


async def _round_trip(entries: list[dict[bytes, bytes]], batch: int) -> None:
    """Every entry comes back exactly once from ``read`` and once from one pass of ``reclaim``,
    good or with a problem; dead-lettering the bad and acknowledging the good empties the stream."""
    q = _queue()
    await q.ensure_group(Q)
    ids = [await _add_raw(q, f) for f in entries]
    want = {i: _expected_run(f) for i, f in zip(ids, entries, strict=True)}

    read: list[Delivery] = []
    while got := await q.read(Q, "a", batch, 10):
        read += got
    assert [d.entry_id for d in read] == ids
    assert {d.entry_id: d.run_id for d in read} == want
    assert all((d.problem is None) == (d.run_id is not None) for d in read)

    reclaimed: list[Delivery] = []
    while got := await q.reclaim(Q, "b", 0, batch):
        if {d.entry_id for d in got} & {d.entry_id for d in reclaimed}:
            break  # the cursor went round: one pass is done
        reclaimed += got
    assert reclaimed == read

    await q.ack_many([d for d in reclaimed if d.problem is None])
    for d in reclaimed:
        if d.problem is not None:
            await q.dead_letter(d, d.problem)
    dead = await q.dead_letters(Q, count=len(entries) + 1)
    assert [(x["_entry"], x["_reason"]) for x in dead] == [
        (d.entry_id, d.problem) for d in read if d.problem is not None
    ]
    assert await q.redis.xlen(q.stream(Q)) == 0
    assert (await q.redis.xpending(q.stream(Q), "workers"))["pending"] == 0


def test_fuzzed_entries_each_come_back_once_and_poison_is_dead_lettered() -> None:
    hyp = pytest.importorskip("hypothesis")
    st = pytest.importorskip("hypothesis.strategies")
    printable = st.characters(blacklist_categories=("Cc", "Cs"))
    good_run = st.text(printable, min_size=1, max_size=MAX_RUN_ID).map(str.encode)
    bad_run = st.one_of(
        st.binary(max_size=12),
        st.just(b""),
        st.text(min_size=1, max_size=8).map(lambda s: (s + "\x00").encode()),
        st.just(b"y" * (MAX_RUN_ID + 1)),
    )
    keys = st.one_of(st.just(b"run"), st.binary(max_size=6))
    fields: Any = st.one_of(
        st.dictionaries(keys, st.binary(max_size=12), min_size=1, max_size=4),
        st.builds(
            lambda r, extra: {**extra, b"run": r},
            st.one_of(good_run, bad_run),
            st.dictionaries(keys, st.binary(max_size=6), max_size=2),
        ),
    )

    @hyp.settings(max_examples=150, deadline=None)
    @hyp.given(st.lists(fields, min_size=1, max_size=12), st.integers(1, 5))
    def check(entries: list[dict[bytes, bytes]], batch: int) -> None:
        asyncio.run(_round_trip(entries, batch))

    check()


async def test_pending_entries_deleted_from_the_stream_are_acknowledged(queue: Queue) -> None:
    await queue.ensure_group(Q)
    for run in ("r1", "r2", "r3"):
        await queue.publish(Q, run)
    r1, r2, r3 = await queue.read(Q, "a", 10, 10)
    await queue.redis.xdel(queue.stream(Q), r1.entry_id, r2.entry_id)

    assert await queue.read(Q, "a", 10, 10, own_pending=True) == [r3]
    assert (await queue.redis.xpending(queue.stream(Q), "workers"))["pending"] == 1
    await queue.redis.xdel(queue.stream(Q), r3.entry_id)
    assert await queue.reclaim(Q, "b", 0, 10) == []  # reported deleted by XAUTOCLAIM
    assert (await queue.redis.xpending(queue.stream(Q), "workers"))["pending"] == 0


async def test_ack_many_acknowledges_and_deletes_across_queues(queue: Queue) -> None:
    got: list[Delivery] = []
    for name in ("q1", "q2"):
        await queue.ensure_group(name)
        await queue.publish(name, "r1")
        await queue.publish(name, "r2")
        got += await queue.read(name, "a", 10, 10)
    await queue.ack_many(got)
    await queue.ack_many([])
    for name in ("q1", "q2"):
        assert await queue.redis.xlen(queue.stream(name)) == 0
        assert (await queue.redis.xpending(queue.stream(name), "workers"))["pending"] == 0


# -- Redis away or emptied ---------------------------------------------------------------


async def test_an_unreachable_redis_raises_service_unavailable() -> None:
    q = Queue("redis://fake", "t", client=fakeredis.FakeAsyncRedis(connected=False))
    d = Delivery(Q, "1-0", {"run": "r1"})
    calls = [
        q.ack(d),
        q.ack_many([d]),
        q.touch([d], "a"),
        q.dead_letter(d, "why"),
        q.read(Q, "a", 10, 10),
        q.reclaim(Q, "a", 0, 10),
        q.lost_data(),
        q.publish(Q, "r1"),
        q.forget_consumers(Q, 1000),
    ]
    for call in calls:
        with pytest.raises(ServiceUnavailable, match="cannot reach Redis"):
            await call


async def test_lost_data_is_reported_once_after_a_flush(queue: Queue) -> None:
    assert await queue.lost_data()  # a fresh Redis: the marker is not there yet
    assert not await queue.lost_data()
    await queue.redis.flushall()
    assert await queue.lost_data()
    assert not await queue.lost_data()


async def test_a_vanished_group_is_reported_by_lost_data(queue: Queue) -> None:
    await queue.ensure_group(Q)
    assert await queue.lost_data()
    assert not await queue.lost_data()

    await queue.redis.xgroup_destroy(queue.stream(Q), "workers")  # the marker survives
    assert await queue.read(Q, "a", 10, 10) == []
    assert await queue.lost_data()
    assert not await queue.lost_data()
    await queue.publish(Q, "r1")  # the group was made again: entries flow
    assert [d.run_id for d in await queue.read(Q, "a", 10, 10)] == ["r1"]

    await queue.redis.xgroup_destroy(queue.stream(Q), "workers")
    assert await queue.reclaim(Q, "a", 0, 10) == []
    assert await queue.lost_data()


# -- consumer names ----------------------------------------------------------------------


async def test_consumer_names_are_unique_per_process_and_hold_nothing(queue: Queue) -> None:
    n1 = queue.consumer_name("host")
    n2 = queue.consumer_name("host")
    assert n1 != n2
    assert re.fullmatch(rf"host-{os.getpid()}-[0-9a-f]{{4}}", n1)
    assert await queue.redis.dbsize() == 0  # a flush cannot hand the same name out twice


@pytest.fixture
async def real() -> AsyncIterator[Queue]:
    url = os.environ.get("OUTLAST_TEST_REDIS_URL") or "redis://127.0.0.1:6379/0"
    client = aioredis.from_url(url, socket_connect_timeout=1)
    try:
        await client.ping()
    except (OSError, aioredis.ConnectionError):
        await client.aclose()
        pytest.skip(f"no Redis at {url}")
    q = Queue(url, f"t-faults-{uuid.uuid4().hex[:8]}", client=client)
    try:
        yield q
    finally:
        keys = [k async for k in client.scan_iter(match=f"{q.prefix}:*")]
        if keys:
            await client.delete(*keys)
        await q.close()


async def test_forget_consumers_deletes_only_idle_consumers_with_nothing_pending(real: Queue) -> None:
    assert await real.forget_consumers(Q, 0) == []  # no stream yet
    await real.ensure_group(Q)
    for run in ("r1", "r2", "r3"):
        await real.publish(Q, run)
    await real.read(Q, "busy", 1, 10)  # holds r1, unacknowledged
    await real.ack_many(await real.read(Q, "gone", 1, 10))
    await asyncio.sleep(0.3)
    await real.ack_many(await real.read(Q, "live", 1, 10))
    assert await real.forget_consumers(Q, 200) == ["gone"]
    info = await real.redis.xinfo_consumers(real.stream(Q), "workers")
    assert sorted(c["name"] for c in info) == [b"busy", b"live"]
    assert (await real.redis.xpending(real.stream(Q), "workers"))["pending"] == 1


async def test_a_vanished_stream_is_reported_by_lost_data_on_the_real_redis(real: Queue) -> None:
    await real.ensure_group(Q)
    await real.lost_data()
    await real.redis.delete(real.stream(Q))  # as after FLUSHALL, with the marker still there
    assert await real.read(Q, "a", 10, 10) == []
    assert await real.lost_data()
    assert not await real.lost_data()
    await real.publish(Q, "r1")
    assert [d.run_id for d in await real.read(Q, "a", 10, 10)] == ["r1"]


async def test_a_poison_entry_does_not_stop_reclaim_on_the_real_redis(real: Queue) -> None:
    await real.ensure_group(Q)
    await _add_raw(real, {b"run": b"\xff"})
    await real.publish(Q, "r1")
    assert len(await real.read(Q, "gone", 10, 10)) == 2
    got = await real.reclaim(Q, "b", 0, 10)
    assert [(d.run_id, d.problem) for d in got] == [(None, "entry is not UTF-8"), ("r1", None)]


# -- the weighted reads of several levels in one round trip ----------------------------------


async def test_read_levels_gives_each_level_its_count_and_survives_a_vanished_group(real: Queue) -> None:
    queue = real  # a vanished stream is refused as Redis refuses it (NOGROUP), unlike fakeredis
    await queue.ensure_group(Q)
    for i in range(3):
        await queue.publish(Q, f"h{i}", priority="high")
    await queue.publish(Q, "n0")
    got = await queue.read_levels(Q, "c1", {"high": 2, "normal": 5, "low": 1})
    assert {lv: [d.run_id for d in ds] for lv, ds in got.items()} == {
        "high": ["h0", "h1"],
        "normal": ["n0"],
        "low": [],
    }
    assert all(d.priority == lv for lv, ds in got.items() for d in ds)
    # One level's stream gone (a flushed key): its read is refused, its group made again and
    # the loss noted; the other levels' entries are still delivered.
    await queue.redis.delete(queue.stream(Q, "low"))
    got = await queue.read_levels(Q, "c1", {"high": 5, "low": 1})
    assert [d.run_id for d in got["high"]] == ["h2"] and got["low"] == []
    assert await queue.lost_data() != []
    await queue.publish(Q, "l0", priority="low")
    assert [d.run_id for d in (await queue.read_levels(Q, "c1", {"high": 1, "low": 1}))["low"]] == ["l0"]


# -- Redis full --------------------------------------------------------------------------


class _FullPipeline:
    """A pipeline of a Redis at ``maxmemory`` with ``noeviction``: every write refused."""

    async def __aenter__(self) -> _FullPipeline:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    def __getattr__(self, name: str) -> Any:
        return lambda *a, **kw: self

    async def execute(self) -> Any:
        from redis.exceptions import OutOfMemoryError

        raise OutOfMemoryError("command not allowed when used memory > 'maxmemory'.")


async def test_a_full_redis_is_an_outage_that_says_so(queue: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    """A publish refused by a full Redis is ServiceUnavailable (the run stays recorded, the
    producer may retry, the sweeper publishes it), not redis-py's own error, and its line says
    what to do."""
    monkeypatch.setattr(queue.redis, "pipeline", lambda **kw: _FullPipeline())
    with pytest.raises(ServiceUnavailable, match=r"is full and refuses writes .*raise its maxmemory"):
        await queue.publish(Q, "r1")
