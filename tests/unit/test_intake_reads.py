"""Which reads the worker's intake makes: each level's share without waiting, then one read that
waits; at light load (the last read waited and brought one entry at most, the worker holds at most
that run) the read that waits at once."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

from outlast.queue import Delivery
from outlast.worker.intake import Intake
from outlast.worker.state import WorkerState


class Reads:
    """A queue that records the reads made of it; only a read that waits brings anything (what
    ``waited`` holds, the entries of one read each)."""

    def __init__(self, waited: list[list[str]]) -> None:
        self.calls: list[str] = []
        self.waited = waited

    async def read_levels(
        self, queue: str, consumer: str, counts: dict[str, int]
    ) -> dict[str, list[Delivery]]:
        self.calls.append("shares")
        return {level: [] for level, n in counts.items() if n > 0}

    async def read(self, *args: Any, **kw: Any) -> list[Delivery]:
        self.calls.append("level")
        return []

    async def read_any(self, queue: str, consumer: str, block_ms: int) -> list[Delivery]:
        self.calls.append("wait")
        levels = self.waited.pop(0) if self.waited else []
        return [Delivery(queue, f"{i}-0", {"run": f"r{i}"}, priority=lv) for i, lv in enumerate(levels)]


def intake_of(state: WorkerState, settings: Any, queue: Any) -> Intake:
    """An intake of ``state`` that serves, acknowledges nothing, and is settled."""

    async def nothing(*args: Any) -> None:
        return None

    return Intake(
        state=state, settings=settings, queue=queue, serve=nothing, settled=lambda: True, ack=nothing
    )


def reads(concurrency: int, holding: int, waited: list[list[str]], times: int) -> list[str]:
    """The reads each of ``times`` reads made, in turn, by a worker that holds ``holding`` runs."""
    queue = Reads(waited)
    state = WorkerState(queues=["default"], programs={}, name="w", tasks=cast(Any, set(range(holding))))
    intake = intake_of(state, SimpleNamespace(concurrency=concurrency), queue)
    made = []
    for _ in range(times):
        queue.calls = []
        asyncio.run(intake._read("default", 50))
        made.append(queue.calls[0] if queue.calls == ["wait"] else "shares first")
    return made


def test_at_light_load_the_read_that_waits_comes_at_once() -> None:
    # One entry came to a read that waited; the worker holds that run: no pass of reads that do
    # not wait (a round trip beside the claim just sent), again and again while it stays so.
    assert reads(4, 1, [["normal"], ["high"], []], 4) == ["shares first", "wait", "wait", "wait"]
    assert reads(4, 0, [[], []], 3) == ["shares first", "wait", "wait"]


def test_entries_of_several_levels_come_by_shares_next() -> None:
    # The read that waited brought entries of two levels: a backlog, read by shares (8:3:1).
    assert reads(4, 1, [["high", "low"], ["normal"]], 4) == ["shares first", "shares first", "wait", "wait"]


def test_a_busier_worker_reads_shares_first() -> None:
    assert reads(4, 2, [["normal"], ["normal"]], 3) == ["shares first"] * 3
    assert reads(1, 0, [["normal"], ["normal"]], 3) == ["shares first"] * 3  # one place: a share picks it


def waits(queues: list[str], lease_ttl: float = 30.0) -> list[int]:
    """How long (ms) each read of an idle worker's first passes over ``queues`` may wait."""
    waited: list[int] = []

    class Idle(Reads):
        async def any_idle(self, queue: str, min_idle_ms: int) -> bool:
            return False

        async def read_any(self, queue: str, consumer: str, block_ms: int) -> list[Delivery]:
            waited.append(block_ms)
            if len(waited) >= 3 * len(queues):
                state.stopping.set()
            return []

    state = WorkerState(queues=queues, programs={}, name="w")
    asyncio.run(intake_of(state, SimpleNamespace(concurrency=4, lease_ttl=lease_ttl), Idle([])).read_loop())
    return waited


def test_an_idle_pass_over_several_queues_waits_half_a_second_at_most() -> None:
    # Each queue's read waits its share of a pass in turn: an entry on another queue waits up to a
    # pass, so with several queues a pass stays 0.5 s. One queue alone waits up to 2 s.
    assert max(waits(["a", "b"])) <= 250 and max(waits(["a", "b", "c", "d"])) <= 125
    assert max(waits(["a"])) == 2000
