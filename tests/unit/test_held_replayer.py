"""The replayer's held entries against a store that records its writes (no server): the order
in which they reach the store, the timer, the cap, and a refused write that voids what follows."""

from __future__ import annotations

import asyncio
from dataclasses import fields
from datetime import UTC, datetime
from typing import Any, cast

import pytest

from outlast._journal import Entry
from outlast._model import RunRecord
from outlast.errors import Fenced
from outlast.store.journal import Journal
from outlast.store.messages import Messages
from outlast.worker.control import RunControl
from outlast.worker.replayer import Journaled, Replayer
from outlast.worker.writes import JournalWrites


class Recorder:
    """Records each append (the entries of one statement) and each other write, in order."""

    def __init__(self, refuse: bool = False) -> None:
        self.writes: list[tuple[str, list[int]]] = []
        self.refuse = refuse

    def submit_append(
        self, run_id: str, token: int, entry: Entry, held: list[Entry], size: int
    ) -> asyncio.Future[list[dict[str, Any]]]:
        self.writes.append(("append", [e.seq for e in [*held, entry]]))  # queued, in this order
        written: asyncio.Future[list[dict[str, Any]]] = asyncio.get_running_loop().create_future()
        rows = [] if self.refuse else [{"cancel_requested": False}]
        asyncio.get_running_loop().call_soon(written.set_result, rows)  # a round trip: others run
        return written

    async def finish(self) -> bool:
        self.writes.append(("finish", []))
        return True


def replayer(store: Recorder, hold_ms: float = 60000, hold_max: int = 16) -> tuple[Replayer, JournalWrites]:
    now = datetime.now(UTC)
    row: dict[str, Any] = {f.name: None for f in fields(RunRecord)}
    row |= {"id": "r", "workflow": "w", "input": {}, "fencing_token": 1, "attempts": 1}
    row |= {"journal_head": "", "journal_len": 0, "created_at": now, "updated_at": now}
    control = RunControl(run_id="r", token=1)
    writes = JournalWrites(
        journal=cast(Journal, store),
        messages=cast(Messages, store),
        control=control,
        hold=(hold_ms, hold_max),
    )
    r = Replayer(record=RunRecord(**row), control=control, writes=writes, journal=Journaled([]))
    return r, writes


def test_held_entries_go_first_in_the_next_append_and_before_any_other_write() -> None:
    async def go() -> list[tuple[str, list[int]]]:
        store = Recorder()
        r, writes = replayer(store)
        await r.hold("result", "op-1", {"ok": 1})
        await r.hold("result", "op-2", {"ok": 2})
        assert store.writes == []  # held: nothing written yet
        await r.append("intention", "op-3", {})
        await r.hold("result", "op-3", {"ok": 3})
        assert await writes.fenced("finish", store.finish())
        return store.writes

    assert asyncio.run(go()) == [("append", [1, 2, 3]), ("append", [4]), ("finish", [])]


def test_the_final_state_is_queued_right_after_the_held_entries() -> None:
    async def go() -> tuple[list[tuple[str, list[int]]], int | None]:
        store = Recorder()
        r, writes = replayer(store)
        await r.hold("result", "op-1", {"ok": 1})
        assert await writes.fenced("finish", store.finish(), chained=True)
        return store.writes, r.journal.length  # the length the final state is committed on

    assert asyncio.run(go()) == ([("append", [1]), ("finish", [])], 1)


def test_the_timer_and_the_cap_write_what_is_held() -> None:
    async def go() -> list[tuple[str, list[int]]]:
        store = Recorder()
        r, _ = replayer(store, hold_ms=5, hold_max=3)
        await r.hold("result", "op-1", {"ok": 1})
        await asyncio.sleep(0.1)  # the timer's flush
        for n in (2, 3, 4):  # the third one held reaches the cap
            await r.hold("result", f"op-{n}", {"ok": n})
        return store.writes

    assert asyncio.run(go()) == [("append", [1]), ("append", [2, 3, 4])]


def test_a_refused_flush_voids_what_follows_and_no_other_write_is_made() -> None:
    async def go() -> Recorder:
        store = Recorder(refuse=True)
        r, writes = replayer(store, hold_ms=5)
        await r.hold("result", "op-1", {"ok": 1})
        await asyncio.sleep(0.1)  # the timer's flush is refused (another fencing token)
        assert writes._control.dispatch_stopped
        with pytest.raises(Fenced):
            await writes.fenced("finish", store.finish())
        with pytest.raises(Fenced):
            await r.hold("result", "op-2", {"ok": 2})
        return store

    assert asyncio.run(go()).writes == [("append", [1])]
