"""``ClientShown`` reads what a run shows from outside, with no worker.

It reads its state (``state``, ``wait_state``: Postgres, pushed by LISTEN as ``wait`` is) and its
live output (``stream``: Redis, at most once, then the durable result). Its custom events are
read with ``events`` and ``follow``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator
from typing import Any

from outlast._model import Chunk, RunRecord, StateValue
from outlast.errors import InvalidInput, WaitTimeout
from outlast.producer.checks import check_text
from outlast.producer.core import ClientCore
from outlast.queue import LiveChunks


class ClientShown(ClientCore):
    """A run's state and live output."""

    async def state(self, run_id: str, key: str | None = None) -> Any:
        """The run's state: every key as ``{key: StateValue}``, or one key's ``StateValue`` (None
        if never set). Read from Postgres, with or without a worker, also after the run ended."""
        if key is not None:
            check_text(key, "a state key", "")
        await self.status(run_id)
        rows = await self.store.shown.run_state(run_id, key)
        values = {r["key"]: StateValue(r["key"], r["value"], r["version"], r["seq"]) for r in rows}
        return values.get(key) if key is not None else values

    async def wait_state(
        self,
        run_id: str,
        key: str,
        after_version: int | None = None,
        timeout: float | None = None,
        poll: float = 1.0,
    ) -> StateValue:
        """The key's value once its version is newer than ``after_version`` (None: once it is set
        at all). Woken by Postgres when the run sets state, as ``wait`` is. Raises ``WaitTimeout``
        after ``timeout`` seconds, or at once when the run has ended without such a version."""
        check_text(key, "a state key", "")
        loop = asyncio.get_running_loop()
        until = None if timeout is None else loop.time() + timeout
        since = after_version or 0
        await self.status(run_id)
        async with self.store.watch(run_id, poll) as watch:
            while True:
                final = (await self.status(run_id)).final  # read before the state: none is missed
                rows = await self.store.shown.run_state(run_id, key)
                if rows and rows[0]["version"] > since:
                    r = rows[0]
                    return StateValue(r["key"], r["value"], r["version"], r["seq"])
                left = None if until is None else until - loop.time()
                if final or (left is not None and left <= 0):
                    why = "it has ended" if final else f"after {timeout}s"
                    raise WaitTimeout(
                        f"run '{run_id}': state '{key}' has no version after {since} ({why}); "
                        f"see: outlast state {run_id}"
                    )
                await watch.changed(left)

    async def stream(
        self, run_id: str, after: str = "0", block: float = 1.0
    ) -> AsyncGenerator[Chunk | RunRecord]:
        """The run's live chunks (``Chunk``) as they come, from the oldest kept (``after``: the id
        of the last chunk seen), then, once the run is final, its durable record (``RunRecord``)
        as the last item. Chunks are at most once: one lost with its worker is not seen, and a
        reader that comes late sees the recent ones only (the last 1,000, kept 5 minutes)."""
        if isinstance(block, bool) or not isinstance(block, int | float) or not 0 < block <= 60:
            raise InvalidInput(f"block must be from 0 to 60 seconds, got {block!r}")
        run = await self.status(run_id)
        live = LiveChunks(self.queue)
        seen = ended = False  # a chunk seen; the end mark seen (the worker that ended it streamed)
        while True:
            final = run.final  # read before the chunks: one sent before the end is read after
            # Final: the chunks its worker still sends come before its end mark, waited for a while.
            wait = None if final and (ended or not seen) else int(block * 1000)
            got = await live.read(run_id, after, wait)
            for entry_id, fields in got:
                after = entry_id
                if "end" in fields:
                    ended = True
                    continue
                seen = True
                data = json.loads(fields["d"]) if "j" in fields else fields.get("d")
                yield Chunk(data, fields.get("o") or None, entry_id)
            if final and (ended or not got):
                yield run
                return
            if not final and (ended or not got):
                run = await self.status(run_id)
