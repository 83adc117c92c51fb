"""Batch actions on a filtered runs list: cancel, resume or retry every run the list's filters
match (up to MAX_BATCH), after a confirmation that showed how many; refused when the count has
changed since, so nobody acts on runs they did not see counted."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from outlast.dashboard import lists
from outlast.errors import OutlastError
from outlast.identity import Principal
from outlast.model import Run, RunState
from outlast.producer import AsyncClient

MAX_BATCH = 1000
ACTS = ("cancel", "resume", "retry")


class BatchRefused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _fits(act: str, run: Run) -> bool:
    """Whether ``act`` applies to the run: cancel an unfinished one, resume a waiting one, retry
    a finished one (as its continuation)."""
    if act == "cancel":
        return not run.final
    if act == "resume":
        return run.state == RunState.WAITING
    return run.final


async def targets(c: AsyncClient, act: str, q: Mapping[str, str]) -> list[Run]:
    """The runs of the list ``q`` that ``act`` applies to, every page of it."""
    if act not in ACTS:
        raise BatchRefused(404, f"no batch action '{act[:40]}' ({', '.join(ACTS)})")
    query, found, cursor = lists.run_query(q), [], None
    while True:
        page, cursor = await c.runs_page(query, limit=500, cursor=cursor)
        found += [r for r in page if _fits(act, r)]
        if len(found) > MAX_BATCH:
            raise BatchRefused(400, f"more than {MAX_BATCH} runs match: narrow the filter")
        if cursor is None:
            return found


async def run_batch(
    c: AsyncClient, who: Principal, act: str, q: Mapping[str, str], count: int
) -> dict[str, Any]:
    """Act on the list's runs as ``who`` (each recorded in the run's events), if they are still
    the ``count`` confirmed; what was done and what was refused, by run."""
    runs = await targets(c, act, q)
    if len(runs) != count:
        raise BatchRefused(409, f"{len(runs)} runs match now, not the {count} confirmed: look again")
    done, refused = [], {}
    for run in runs:
        try:
            if act == "cancel":
                await c.cancel(run.id, principal=who)
            elif act == "resume":
                await c.resume(run.id, principal=who)
            else:
                await c.continue_run(run.id, principal=who)
            done.append(run.id)
        except OutlastError as exc:  # it moved meanwhile: said, the others still done
            refused[run.id] = str(exc)
    return {"act": act, "done": done, "refused": refused}
