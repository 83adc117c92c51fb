"""An acknowledgement is queued when the worker asks for it, not when someone awaits it: a run's
place is freed at its final commit, and its entry acknowledged on the next round trip without it."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from outlast.queue import Delivery
from outlast.worker.acks import Acks


async def test_an_ack_asked_for_and_not_awaited_is_sent() -> None:
    sent: list[str | None] = []

    class Sent:
        async def ack_many(self, batch: list[Delivery]) -> None:
            sent.extend(d.run_id for d in batch)

    acks = Acks(queue=cast(Any, Sent()))
    acks.ack(Delivery("default", "1-0", {"run": "r1"}))  # the run's task has ended meanwhile
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert sent == ["r1"]
    assert acks.task is None  # and a stopping worker has nothing left to wait for
