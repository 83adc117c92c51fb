"""``Linger`` keeps a run whose receive finds no message held in its worker for a moment.

Without it, a receive with no message waiting commits the run's wait and lets it go: the next
message publishes it, a worker claims it and replays its whole journal (~11 µs an entry: a
conversation's 1,000th turn pays ~40 ms of it, bench/conversation.py). Lingering, the run keeps
its lease, its worker slot and its suspended coroutine for up to ``OUTLAST_RECEIVE_LINGER``
seconds, and a message sent meanwhile is taken by the same receive, with no replay; only then is
the wait committed, as without it. The lease keeps renewing (the heartbeat renews every run the
worker holds), and a lingering run counts against the worker's concurrency: that is the bound on
the memory it keeps.

A send notifies a watched run (``sql/messages.sql``): the receive joins the worker's one shared
``Listener`` for its run, then looks, then waits for news or the linger's end, and looks again
after each; a message sent before the join is found by the first look, one sent after it wakes
the receive. Nothing is lost if a notification is: the wait is committed only if no message was
accepted since the last look. Without LISTEN (a transaction pooler and no OUTLAST_LISTEN_URL) it
looks every ``POLL`` seconds instead. A stopping worker, a cancellation (its event notifies the
run) and a lost lease (the run's task is cancelled) end the linger at once."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import structlog

from outlast._journal import Entry
from outlast.store.connection import Connection
from outlast.store.listener import Listener, SharedWatch
from outlast.store.notify import Watch, channel

log = structlog.get_logger("outlast.worker")
POLL = 0.25  # seconds between looks while no notification can reach the worker
Look = Callable[[], Awaitable[tuple[Entry | None, int]]]


class Linger:
    """``Linger`` holds the worker's lingering receives: its listening connection (opened the first
    time a run lingers), the receives that linger now, and the stop that ends them."""

    def __init__(self, *, seconds: float, connection: Connection) -> None:
        self.seconds = seconds
        self._store = connection
        self._listener: Listener | None = None
        self._watches: set[Watch] = set()
        self._stopped = False
        self._told = False  # the lack of LISTEN logged once

    async def hold(
        self, run_id: str, look: Look, span: float, leaving: Callable[[], bool]
    ) -> tuple[Entry | None, int] | None:
        """Linger up to ``span`` seconds (the setting's at most) for a message to the run
        ``run_id``, looking with ``look``, unless ``leaving`` (the run is stopped, cancelled or
        lost): what the last look found (a message taken, or none and the run's count of accepted
        messages); None if the run does not linger (0, or the worker stops)."""
        span = min(span, self.seconds)
        if span <= 0 or self._stopped:
            return None
        if self._listener is None:
            self._listener = self._store.listener()
        watch = SharedWatch(self._listener, run_id, channel(self._store.schema, run_id), POLL)
        self._watches.add(watch)
        try:
            await watch.start()
            self._tell(watch)
            end = time.monotonic() + span
            got, seen = await look()
            while got is None and not self._ends(leaving) and (left := end - time.monotonic()) > 0:
                await watch.changed(left)
                if self._ends(leaving):
                    break  # no look: the wait fails if a message came since ``seen``, and looks
                got, seen = await look()
            return got, seen
        finally:
            self._watches.discard(watch)
            await watch.close()

    def _ends(self, leaving: Callable[[], bool]) -> bool:
        return self._stopped or leaving()

    def _tell(self, watch: Watch) -> None:
        if not watch.listening and not self._told:
            self._told = True
            log.warning("linger.polling", every=POLL, why="no LISTEN: " + self._store.wakeups)

    def stop(self) -> None:
        """The worker stops: every lingering receive ends now, and none lingers from now on."""
        self._stopped = True
        for watch in self._watches:
            watch.wake()

    async def close(self) -> None:
        if self._listener is not None:
            await self._listener.close()
