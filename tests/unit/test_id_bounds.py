"""Ids that name runs stay run ids: a child's id (its parent's id and operation) and a schedule's
name (its ticks' runs are NAME@tick) are refused at once when they would not fit."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any, cast

import pytest

from outlast import App, InvalidInput
from outlast._schedules import MAX_NAME, Schedule, run_id
from outlast.queue import MAX_RUN_ID, run_id_problem
from outlast.worker.children import RunChildren


class Reached(Exception):
    """The start went on to insert the child."""


class Replayer:
    """Live, nothing journaled: the start is new."""

    def __init__(self) -> None:
        self.live: list[str] = []

    def enter(self, op_id: str) -> None:
        pass

    def journaled(self, op_id: str) -> bool:
        return False

    async def go_live(self, op_id: str, asks: object = None) -> None:
        self.live.append(op_id)


class Store:
    def __init__(self) -> None:
        self.inserted: list[dict[str, Any]] = []

    async def insert_child(self, run_id: str, token: int, row: dict[str, Any]) -> Any:
        self.inserted.append(row)
        raise Reached(row["id"])


class Control:
    token = 1

    async def db(self, aw: Any) -> Any:
        return await aw


class Writes:
    inline_max = referenced = None  # no payload store: every input inline

    async def fenced(self, what: str, write: Any) -> Any:  # no result held here: the write itself
        return await write


def children(run_id: str) -> tuple[RunChildren, Replayer, Store]:
    app = App()

    @app.workflow("kid")
    async def kid(run: object) -> None:
        pass

    replayer, store = Replayer(), Store()
    record = cast(Any, SimpleNamespace(id=run_id, queue="default"))
    settled = cast(Any, None)
    scope = SimpleNamespace(
        record=record, app=app, control=Control(), writes=Writes(), replayer=replayer, max_payload=None
    )
    made = RunChildren(cast(Any, scope), children=cast(Any, store), runs=cast(Any, store), settled=settled)
    return made, replayer, store


async def test_a_child_id_longer_than_a_run_id_is_refused_before_anything_is_written() -> None:
    op = "op-1"
    parent = "p" * (MAX_RUN_ID - len(op))  # parent:op-1 is one character too long
    made, replayer, store = children(parent)
    with pytest.raises(InvalidInput, match=f"longer than {MAX_RUN_ID} characters"):
        await made.start(op, "kid", {}, None)
    assert store.inserted == [] and replayer.live == []  # refused before going live or writing

    fits = "p" * (MAX_RUN_ID - len(op) - 1)  # exactly MAX_RUN_ID characters: started
    made, replayer, store = children(fits)
    with pytest.raises(Reached):
        await made.start(op, "kid", {}, None)
    assert [row["id"] for row in store.inserted] == [f"{fits}:{op}"]
    assert run_id_problem(store.inserted[0]["id"]) is None


def test_a_schedule_name_longer_than_max_name_is_refused() -> None:
    with pytest.raises(ValueError, match=f"1 to {MAX_NAME} characters"):
        Schedule(name="s" * (MAX_NAME + 1), cron="* * * * *", workflow="w")
    with pytest.raises(ValueError, match=f"1 to {MAX_NAME} characters"):
        Schedule(name="", cron="* * * * *", workflow="w")
    longest = Schedule(name="s" * MAX_NAME, cron="* * * * *", workflow="w")
    tick = datetime(2026, 12, 1, 1, 30, tzinfo=UTC)
    assert run_id_problem(run_id(longest.name, tick)) is None
    assert run_id_problem(f"{longest.name}@trigger-{'0' * 12}") is None

    app = App()

    @app.workflow("w")
    async def w(run: object) -> None:
        pass

    with pytest.raises(ValueError, match=f"1 to {MAX_NAME} characters"):
        app.schedule("* * * * *", name="s" * (MAX_NAME + 1), workflow="w")
