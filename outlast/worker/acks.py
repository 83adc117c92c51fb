"""A stream entry is acknowledged (``XACK`` + ``XDEL``) only once its run's
state is committed. Entries acknowledged while a round trip is out go together in the next one;
through a Redis outage they are retried, and an entry left unacknowledged is only delivered
again (its claim then finds nothing to do)."""

from __future__ import annotations

import asyncio
import contextvars

import structlog
from redis.exceptions import RedisError

from outlast.errors import ServiceUnavailable
from outlast.queue import Delivery, Queue

log = structlog.get_logger("outlast.worker")


class Acks:
    """``Acks`` is the worker's acknowledger: one batching task at a time, started by the first ``ack``."""

    def __init__(self, *, queue: Queue) -> None:
        self.queue = queue
        self.context = contextvars.copy_context()  # the worker's own, without any run's
        self.task: asyncio.Task[None] | None = None  # the acknowledger, while entries wait
        self._failing = False
        self._unacked: list[tuple[Delivery, asyncio.Future[None]]] = []

    async def ack(self, d: Delivery) -> None:
        """Acknowledge once the run's state is committed. Batched: entries acknowledged while a
        round trip is out go together in the next one; returns once ``d``'s round trip is done."""
        done = asyncio.get_running_loop().create_future()
        self._unacked.append((d, done))
        if self.task is None:
            self.task = asyncio.create_task(self._batches(), context=self.context.copy())
        await asyncio.shield(done)

    async def _batches(self) -> None:
        try:
            while self._unacked:
                batch, self._unacked = self._unacked, []
                try:
                    await self._all([d for d, _ in batch])
                except Exception:  # never a stuck acknowledger: these are delivered again
                    log.exception("ack.failed", entries=len(batch))
                finally:
                    for _, done in batch:  # done trying: an entry left is only delivered again
                        if not done.done():
                            done.set_result(None)
        finally:
            self.task = None

    async def _all(self, batch: list[Delivery]) -> None:
        """Through a Redis outage, retry (an entry left unacknowledged is only delivered again,
        and its claim then finds nothing to do)."""
        for attempt in range(20):
            try:
                await self.queue.ack_many(batch)
            except (ServiceUnavailable, RedisError, OSError) as exc:
                if not self._failing:  # once per outage, not once per entry
                    self._failing = True
                    log.warning("ack.failing", error=str(exc))
                await asyncio.sleep(min(0.1 * 2**attempt, 2.0))
                continue
            if self._failing:
                self._failing = False
                log.info("ack.recovered")
            return
        ids = ", ".join(d.run_id or "?" for d in batch[:5]) + (", ..." if len(batch) > 5 else "")
        log.warning("ack.given_up", runs=ids)
