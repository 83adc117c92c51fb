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

    def stops() -> None:
        raise StopIteration  # a Future refuses it: the call would never return

    try:
        await asyncio.wait_for(pool.call(stops, {}), 30)
    except RuntimeError as exc:  # as a coroutine's StopIteration is
        assert str(exc) == "stops raised StopIteration"
        assert isinstance(exc.__cause__, StopIteration)
    else:
        raise AssertionError("a StopIteration was not raised in its caller as a RuntimeError")


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


async def test_results_that_arrive_together_are_settled_by_one_wake_up_of_the_loop() -> None:
    pool = ToolThreads(base=8)
    loop = asyncio.get_running_loop()
    wake_ups = []
    threadsafe = loop.call_soon_threadsafe

    def counted(*args: object) -> asyncio.Handle:
        wake_ups.append(args)
        return threadsafe(*args)  # type: ignore[arg-type]

    loop.call_soon_threadsafe = counted  # type: ignore[method-assign]
    try:
        calls = [asyncio.ensure_future(pool.call(lambda k: k, {"k": k})) for k in range(8)]
        await asyncio.sleep(0)  # every call handed to a thread
        deadline = time.monotonic() + 30
        while pool.busy and time.monotonic() < deadline:  # the loop held: all 8 results come back
            time.sleep(0.001)
        assert await asyncio.gather(*calls) == list(range(8))
    finally:
        del loop.call_soon_threadsafe
    assert len(wake_ups) == 1


def test_results_a_closed_loop_never_settled_are_dropped() -> None:
    pool = ToolThreads(base=1)
    gone = asyncio.new_event_loop()
    call = gone.create_task(pool.call(lambda: 1, {}))
    gone.call_soon(gone.stop)
    gone.run_forever()  # the call is handed to a thread, and the loop stops before its result
    deadline = time.monotonic() + 30
    while pool.busy and time.monotonic() < deadline:
        time.sleep(0.001)
    gone.close()  # its result waits in a batch the loop will never settle
    assert asyncio.run(pool.call(lambda: 2, {})) == 2  # another loop's result sweeps it out
    assert pool._settling == {} and not call.done()
