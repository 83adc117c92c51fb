"""Redis says once that it lost its data (``Queue.lost_data``: the marker is set again as it is
found gone). The sweeper keeps that until it has re-published everything due, even when Postgres
fails it in between, at the first question it asks (whether this Redis was ever used). Fakes
stand in for Postgres and Redis."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
import structlog

from outlast.errors import ServiceUnavailable
from outlast.queue.undelivered import Waiting
from outlast.settings import Settings
from outlast.worker.sweeper import Sweeper


class _Queue:
    def __init__(self) -> None:
        self.gone = ["p:alive"]  # said once
        self.published: list[str] = []

    async def lost_data(self) -> list[str]:
        gone, self.gone = self.gone, []
        return gone

    async def publish(self, queue: str, run_id: str, priority: str = "normal") -> None:
        self.published.append(run_id)

    async def forget_consumers(self, queue: str, idle_ms: int) -> list[str]:
        return []

    async def ensure_group(self, queue: str) -> None:
        return None

    async def waiting(self, queues: list[str]) -> Waiting:
        return Waiting()  # nothing vouched for: every due run is re-published


class _Store:
    # each family of the store (``store.fleet``, ``store.sweeps``...) is this same fake
    fleet = sweeps = children = firsts = schedules = runs = rollups = payloads = leases = property(
        lambda self: self
    )

    def __init__(self) -> None:
        self.failing = True

    async def redis_used(self, markers: list[str]) -> bool:
        if self.failing:
            self.failing = False
            raise ServiceUnavailable("cannot reach Postgres at postgresql://h/db: gone for a moment")
        return True

    async def unseen(self, after: float) -> tuple[datetime, bool]:
        return datetime.now(UTC), True

    async def due(
        self,
        after: float,
        limit: int,
        cutoff: datetime,
        spans: Any = (),
        waiting: Any = (),
        queued: bool = True,
    ) -> list[tuple[str, str, str]]:
        return [("lost-run", "default", "normal")] if after == 0.0 else []

    async def expire_deadlines(self, grace: float) -> list[Any]:
        return []

    async def turns(self, limit: int) -> list[Any]:
        return []

    async def workers(self) -> list[dict[str, Any]]:
        return []

    async def wake_child_waiters(self) -> list[str]:
        return []

    async def orphans(self) -> list[Any]:
        return []

    def __getattr__(self, name: str) -> Any:
        async def nothing(*args: Any, **kwargs: Any) -> None:
            return None

        return nothing


async def test_a_data_loss_is_not_forgotten_when_postgres_fails_the_sweep() -> None:
    queue, store = _Queue(), _Store()
    sweeper = Sweeper(store, queue, Settings(), ["default"])  # type: ignore[arg-type]
    log = structlog.get_logger("test")
    with pytest.raises(ServiceUnavailable):
        await sweeper.sweep(log)
    assert queue.published == []
    await sweeper.sweep(log)  # Redis no longer says it: the sweeper remembers
    assert queue.published == ["lost-run"]
