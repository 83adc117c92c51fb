"""The reclaim's looks (``Intake.reclaim``): entries are touched every third of a lease, so with
none pending for half a lease, none can be reclaimed for another half: an idle worker looks that
much later instead of every half second (XAUTOCLAIM on every level of every queue). An entry left
by a dead worker is still reclaimed within half a second of its lease + 0.25 s of idleness."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from outlast.producer.client import AsyncClient
from outlast.queue import Delivery
from outlast.worker.intake import Intake
from outlast.worker.state import WorkerState
from tests.conftest import World

pytestmark = pytest.mark.both_redis  # the queue layer: on Redis 6.2 (embedded) and 7 (PATH)

TTL = 2.0


async def test_an_idle_worker_looks_for_orphans_every_half_lease(world: World) -> None:
    s = world.settings(lease_ttl=TTL)
    c = AsyncClient(settings=s)
    await c.open()
    try:
        await c.queue.ensure_group("default")
        autoclaims: list[str] = []
        reclaim = c.queue.reclaim

        async def counted(*args: Any, **kwargs: Any) -> list[Delivery]:
            autoclaims.append(args[0])
            return await reclaim(*args, **kwargs)

        c.queue.reclaim = counted  # type: ignore[method-assign]
        taken: list[tuple[Delivery, bool, float]] = []

        async def serve(d: Delivery, reclaimed: bool) -> None:
            taken.append((d, reclaimed, time.monotonic()))

        async def ack(d: Delivery) -> None:
            return None

        state = WorkerState(queues=["default"], programs={}, name="survivor")
        intake = Intake(state=state, settings=s, queue=c.queue, serve=serve, settled=lambda: True, ack=ack)
        assert await intake.reclaim() == TTL / 2  # nothing pending: the next look in half a lease
        run = (await c.enqueue("echo", {})).id
        [orphan] = await c.queue.read("default", "dead", 1, None)  # its worker dies at once
        delivered = time.monotonic()
        assert await intake.reclaim() == TTL / 2  # pending, not for half a lease yet
        assert autoclaims == []
        looks = 0
        while not taken:
            looked = time.monotonic()
            await asyncio.sleep(max(looked + await intake.reclaim() - time.monotonic(), 0))
            looks += 1
        [(d, reclaimed, at)] = taken
        assert d.run_id == orphan.run_id == run and reclaimed
        assert TTL + 0.25 <= at - delivered <= TTL + 0.25 + 0.5 + 0.2, at - delivered
        assert looks <= 1 + (0.5 * TTL + 0.25) / 0.5 + 2, looks  # one quiet look, then every 0.5 s
    finally:
        await c.close()
