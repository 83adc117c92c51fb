"""Redis says once that it lost its data (or, through Sentinel, that a new primary answers); the
sweeper's re-publication of every due run must happen even when its first try fails (Redis or
Postgres flapping right after the loss): lost_data() will not say it again."""

from __future__ import annotations

from typing import Any

import pytest
import structlog

from outlast.errors import ServiceUnavailable
from outlast.producer.client import AsyncClient
from outlast.worker.sweeper import Sweeper
from tests.conftest import World

pytestmark = pytest.mark.both_redis  # the queue layer: on Redis 6.2 (embedded) and 7 (PATH)


async def test_a_failed_republication_after_a_loss_is_tried_again(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    c = AsyncClient(settings=world.settings())
    await c.open()
    try:
        rid = (await c.enqueue("echo", {})).id
        r = world.redis()
        r.delete(c.queue.stream("default"), c.queue.alive_key())  # lost, as after a flush
        real = c.queue.publish
        tries: list[str] = []

        async def flapping(queue: str, run_id: str, *args: Any, **kw: Any) -> str:
            tries.append(run_id)
            if len(tries) == 1:
                raise ServiceUnavailable("Redis went away again")
            return await real(queue, run_id, *args, **kw)

        monkeypatch.setattr(c.queue, "publish", flapping)
        sweeper = Sweeper(c.store, c.queue, world.settings(republish_after=60), ["default"])
        log = structlog.get_logger()
        with pytest.raises(ServiceUnavailable):
            await sweeper.sweep(log)
        assert r.xlen(c.queue.stream("default")) == 0
        await sweeper.sweep(log)  # the marker is back: only the sweeper remembers the loss
        assert [f["run"] for _, f in r.xrange(c.queue.stream("default"))] == [rid]
    finally:
        await c.close()
