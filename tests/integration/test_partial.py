"""``partial``, on real Postgres and Redis with a real worker (in-process, through outlast.testing):
a workflow that accepts partial results ends ``partial`` with what it produced and what is
unfinished — when it returns ``Partial``, and when its budget or deadline stops it and its
partial handler says what it produced; a workflow that does not accept them never ends
``partial``. Effects are counted in a list the tools append to, not only in the result."""

from __future__ import annotations

import threading
import time
from typing import Any

from outlast import App, BudgetExhausted, DeadlineExceeded, OutlastError, Partial, Run
from outlast.testing import HarnessFactory, outlast_harness, outlast_servers

__all__ = ["outlast_harness", "outlast_servers"]  # the fixtures, without the plugin installed

app = App()
fetched: list[str] = []
released = threading.Event()  # lets the run holding the worker's one slot end


@app.tool("fetch", cost={"usd": 1})
def fetch(source: str) -> str:
    fetched.append(source)
    return f"notes from {source}"


@app.tool("slow_fetch")
def slow_fetch(source: str) -> str:
    time.sleep(1.5)  # the run's deadline passes meanwhile
    fetched.append(source)
    return f"notes from {source}"


@app.workflow("survey", partial=True)
async def survey(run: Run, sources: list[str], skip: list[str]) -> Partial[list[str]] | list[str]:
    notes = [await run.call(fetch, source=s) for s in sources if s not in skip]
    if skip:
        return Partial(notes, unfinished=skip)
    return notes


@app.workflow("strict")
async def strict(run: Run, sources: list[str]) -> Partial[list[str]]:
    return Partial([await run.call(fetch, source=s) for s in sources], unfinished=["more"])


def what_was_done(run_input: dict[str, Any], error: OutlastError) -> Partial[dict[str, Any]]:
    done = [s for s in run_input["sources"] if s in fetched]
    unfinished = [s for s in run_input["sources"] if s not in fetched]
    return Partial({"done": done, "stopped_by": type(error).__name__}, unfinished=unfinished)


@app.workflow("bounded", partial=what_was_done)
async def bounded(run: Run, sources: list[str], slow: bool = False) -> list[str]:
    tool = slow_fetch if slow else fetch
    return [await run.call(tool, source=s) for s in sources]


@app.tool("hold")
def hold() -> None:
    released.wait(30)


@app.workflow("holding")
async def holding(run: Run) -> None:
    await run.call(hold)


@app.workflow("unbounded")
async def unbounded(run: Run, sources: list[str]) -> list[str]:
    return [await run.call(fetch, source=s) for s in sources]


def test_a_returned_partial_ends_the_run_partial(outlast_harness: HarnessFactory) -> None:
    fetched.clear()
    h = outlast_harness(app)
    h.start_worker()
    part = h.client.enqueue("survey", {"sources": ["a", "b", "c"], "skip": ["c"]})
    whole = h.client.enqueue("survey", {"sources": ["d"], "skip": []})
    done = h.wait(part.id)
    assert done.state == "partial", done.reason
    assert done.result == {"output": ["notes from a", "notes from b"], "unfinished": ["c"]}
    assert h.wait(whole.id).state == "succeeded"  # accepting partial results is not ending partial
    assert sorted(fetched) == ["a", "b", "d"]


def test_a_workflow_that_does_not_accept_partial_results_never_ends_partial(
    outlast_harness: HarnessFactory,
) -> None:
    fetched.clear()
    h = outlast_harness(app)
    h.start_worker()
    run = h.client.enqueue("strict", {"sources": ["a"]})
    done = h.wait(run.id)
    assert done.state == "failed"
    assert "does not accept partial results" in (done.reason or "")
    assert done.error is not None and done.error["type"] == "PartialRefused"
    stopped = h.client.enqueue("unbounded", {"sources": ["a", "b", "c"]}, budget={"usd": 2})
    assert h.wait(stopped.id).state == "exhausted"  # no handler: its budget ends it exhausted


def test_a_budget_stop_ends_partial_through_the_handler(outlast_harness: HarnessFactory) -> None:
    fetched.clear()
    h = outlast_harness(app)
    h.start_worker()
    run = h.client.enqueue("bounded", {"sources": ["a", "b", "c"]}, budget={"usd": 2})
    done = h.wait(run.id)
    assert done.state == "partial", done.reason
    assert done.result == {
        "output": {"done": ["a", "b"], "stopped_by": BudgetExhausted.__name__},
        "unfinished": ["c"],
    }
    assert "budget exhausted" in (done.reason or "")
    assert fetched == ["a", "b"]  # the third call was never dispatched


def test_a_deadline_stop_ends_partial_through_the_handler(outlast_harness: HarnessFactory) -> None:
    fetched.clear()
    h = outlast_harness(app)
    h.start_worker()
    run = h.client.enqueue("bounded", {"sources": ["a", "b"], "slow": True}, deadline=1.0)
    done = h.wait(run.id)
    assert done.state == "partial", done.reason
    assert done.result == {
        "output": {"done": ["a"], "stopped_by": DeadlineExceeded.__name__},
        "unfinished": ["b"],
    }
    assert done.error is not None and done.error["type"] == "DeadlineExceeded"
    assert fetched == ["a"]


def test_a_deadline_passed_while_queued_ends_partial_through_the_handler(
    outlast_harness: HarnessFactory,
) -> None:
    fetched.clear()
    released.clear()
    # One slot, held: the run waits in the queue while its deadline passes and the sweeper looks.
    h = outlast_harness(app, concurrency=1, republish_after=60.0)
    h.start_worker()
    busy = h.client.enqueue("holding", {})
    h.wait(busy.id, "running")
    run = h.client.enqueue("bounded", {"sources": ["a", "b"]}, deadline=0.5)
    time.sleep(1.5)  # past the deadline, several sweeps
    released.set()
    done = h.wait(run.id)
    assert done.state == "partial", (done.state, done.reason)
    assert done.result == {
        "output": {"done": [], "stopped_by": DeadlineExceeded.__name__},
        "unfinished": ["a", "b"],
    }
    assert done.reason == "deadline passed"
    assert done.error is not None and done.error["type"] == "DeadlineExceeded"
    assert fetched == []
    assert h.wait(busy.id).state == "succeeded"


def test_a_deadline_passed_with_no_worker_for_its_queue_still_ends_the_run(
    outlast_harness: HarnessFactory,
) -> None:
    # Published at its deadline, the run finds no worker to end it: the sweeper ends it itself,
    # timed_out, once republish_after (1 s here) has passed beyond the deadline.
    h = outlast_harness(app)
    h.start_worker()  # serves only the default queue
    run = h.client.enqueue("bounded", {"sources": ["a"]}, deadline=0.3, queue="nobody")
    done = h.wait(run.id, timeout=15)
    assert (done.state, done.reason, done.result) == ("timed_out", "deadline passed", None)
