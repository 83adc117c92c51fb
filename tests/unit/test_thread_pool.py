"""The threads sync tools run on (``outlast.worker.threads``): reused from one call to the next,
grown past any number of hung calls, and thinned out again once idle."""

from __future__ import annotations

import asyncio
import threading
import time

from outlast.worker.threads import ToolThreads


async def test_calls_one_after_another_reuse_one_thread() -> None:
    pool = ToolThreads(base=2)
    seen = [await pool.call(threading.get_ident, {}) for _ in range(5)]
    assert len(set(seen)) == 1 and threading.get_ident() not in seen
    assert (pool.count, pool.busy) == (1, 0)


async def test_a_call_raises_in_its_caller_and_sees_the_callers_context() -> None:
    import contextvars

    where: contextvars.ContextVar[str] = contextvars.ContextVar("where", default="elsewhere")
    where.set("the caller")
    pool = ToolThreads()
    assert await pool.call(where.get, {}) == "the caller"

    def fails(why: str) -> None:
        raise ValueError(why)

    try:
        await pool.call(fails, {"why": "no"})
    except ValueError as exc:
        assert str(exc) == "no"
    else:
        raise AssertionError("the tool's exception was not raised in its caller")


async def test_hung_calls_beyond_the_pool_never_starve_the_next_one() -> None:
    pool = ToolThreads(base=2)
    release = threading.Event()
    hung = [asyncio.ensure_future(pool.call(release.wait, {"timeout": 60})) for _ in range(pool.base + 2)]
    try:
        for _ in range(200):  # every hung call on a thread of its own
            if pool.busy == len(hung):
                break
            await asyncio.sleep(0.01)
        assert pool.busy == len(hung)
        # A thread free of them all takes the next call, which returns while they still hang.
        assert await asyncio.wait_for(pool.call(lambda: "done", {}), 30) == "done"
        assert not any(h.done() for h in hung)
        assert pool.count == len(hung) + 1
    finally:
        release.set()
        await asyncio.gather(*hung)
    assert pool.busy == 0


async def test_a_call_given_up_on_keeps_its_thread_and_its_late_result_is_dropped() -> None:
    pool = ToolThreads(base=1)
    release = threading.Event()
    late = asyncio.ensure_future(pool.call(release.wait, {"timeout": 60}))
    await asyncio.sleep(0.05)
    late.cancel()
    release.set()
    for _ in range(200):
        if pool.busy == 0:
            break
        await asyncio.sleep(0.01)
    assert pool.busy == 0 and late.cancelled()
    assert await pool.call(lambda: 1, {}) == 1


async def test_idle_threads_beyond_the_base_retire() -> None:
    pool = ToolThreads(base=1, retire_after=0.05)
    release = threading.Event()
    calls = [asyncio.ensure_future(pool.call(release.wait, {"timeout": 60})) for _ in range(3)]
    while pool.busy < 3:
        await asyncio.sleep(0.01)
    release.set()
    await asyncio.gather(*calls)
    deadline = time.monotonic() + 30
    while pool.count > 1 and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert (pool.count, pool.busy) == (1, 0)  # the base is kept
    assert await pool.call(lambda: 2, {}) == 2
