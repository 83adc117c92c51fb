"""This module counts what one run journals, for the metric and for its one size warning.

Each append the run commits says how many bytes its entries' bodies took (counted by the run's
writes from the text they send: ``outlast._journal.body_bytes``) and returns the run's count after
it (``journal_bytes``, every generation) and whether the run's size warning is written. So the
count costs the worker one addition an append, and the threshold one comparison: no read of its
own. The run that first passes ``OUTLAST_RUN_SIZE_WARN`` writes its one 'size_warning' event (one
conditional statement, queued on the shared commit) and logs ``run.size_warning`` when that
statement wrote it; a resumed run finds the warning written (its append says so) and says nothing.
"""

from __future__ import annotations

import asyncio
from typing import Any

import structlog

from outlast import _metrics as metrics
from outlast.store.size import Size

log = structlog.get_logger("outlast.worker")


class RunSize:
    """``RunSize`` counts one run's journaled bytes and writes its size warning once."""

    def __init__(self, *, size: Size, run_id: str, workflow: str, warn: int) -> None:
        self._size = size
        self.run_id, self.workflow = run_id, workflow
        self.warn = warn  # OUTLAST_RUN_SIZE_WARN, in bytes (0: never)
        self._asked = False  # this worker queued the warning: not again for this run

    def written(self, size: int, row: dict[str, Any]) -> None:
        """An append of ``size`` bytes committed; ``row``: one of its rows (the run's count after it)."""
        metrics.journaled(self.workflow, size)
        total = row["journal_bytes"]
        if self.warn and total >= self.warn and not row["size_warned"] and not self._asked:
            self._asked = True
            detail = {
                "bytes": total,
                "threshold": self.warn,
                "message": f"the run has journaled {total} bytes, past OUTLAST_RUN_SIZE_WARN ({self.warn})",
            }
            warned = self._size.submit_size_warning(self.run_id, detail)
            warned.add_done_callback(lambda done: self._warned(done, total))

    def _warned(self, done: asyncio.Future[list[dict[str, Any]]], total: int) -> None:
        """The warning's write: logged if it wrote the event; tried again at the run's next append
        if it failed (Postgres out of reach: the run meets that at its own writes too)."""
        if done.cancelled() or done.exception() is not None:
            self._asked = False
            return
        if done.result():
            log.warning(
                "run.size_warning",
                run_id=self.run_id,
                workflow=self.workflow,
                bytes=total,
                threshold=self.warn,
            )
