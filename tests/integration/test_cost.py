"""The cost model: an operation costs at most two commits; a replayed one no round trip."""

from __future__ import annotations

from typing import Any

from outlast import App
from outlast.store import Store
from outlast.worker.executor import Execution, HandOver, Outcome
from tests.conftest import World

app = App()
dispatched: list[int] = []
current: list[Execution] = []


@app.tool("step", idempotent=True)
def step(i: int) -> int:
    dispatched.append(i)
    if i == 9 and not current[-1].control.stop.is_set() and len(dispatched) == 10:
        current[-1].control.stop.set()  # the worker is told to stop: the next crossing hands over
    return i * i


@app.workflow("ten")
async def ten(run: Any) -> list[int]:
    return [await run.call("step", i=i) for i in range(11)]


async def test_two_commits_per_operation_and_free_replay(world: World) -> None:
    store = Store(world.database_url, world.schema)
    await store.open()
    await store.runs.insert_run(
        id="r", workflow="ten", queue="default", input={}, input_hash="h", program=None, deadline_in=None
    )
    dispatched.clear()
    got = await store.leases.claim("r", "w1", 30, app.programs())
    assert got is not None
    run = got[0]
    first = Execution(run=run, app=app, store=store)
    current.append(first)
    commits, writes = store.writer.commits, store.writer.writes
    try:
        await first.execute()
        raise AssertionError("expected a hand-over at the 11th crossing")
    except HandOver:
        pass
    assert store.writer.writes - writes == 20  # intention + result for each of 10 operations
    assert store.writer.commits - commits <= 20
    assert await store.leases.release("r", run.fencing_token, "test")

    got = await store.leases.claim("r", "w2", 30, app.programs())
    assert got is not None
    run2 = got[0]
    assert run2.journal_len == 20
    second = Execution(run=run2, app=app, store=store)
    current.append(second)
    reads, writes = store.reads, store.writer.writes
    assert await second.execute() == Outcome.FINAL
    assert store.reads - reads == 1  # the journal, loaded once; ten replayed operations cost nothing
    assert store.writer.writes - writes == 3  # the 11th operation's two writes and the final state
    assert dispatched == list(range(11))  # no replayed operation was dispatched again
    done = await store.runs.get_run("r")
    assert done is not None and done.state == "succeeded" and done.result == [i * i for i in range(11)]
    await store.close()
