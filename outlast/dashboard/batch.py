"""Batch actions apply to a filtered runs list. They cancel, resume or retry every run the list's filters
match (up to MAX_BATCH), after a confirmation that showed the filter, how many runs of each state
it acts on, and a digest of their ids. The act is refused when other runs match by then (one left
the list, another joined: the same count is not enough), so nobody acts on a run they did not see
counted.

A retry is a continuation: a new run with new idempotency keys, whose effects happen again. A batch
retry takes only the runs that did not end well (``RETRIED``); succeeded and partial runs are
retried only when the operator names their states (``include``)."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from outlast._model import RunRecord, RunState
from outlast.dashboard import lists
from outlast.errors import OutlastError
from outlast.identity import Principal
from outlast.producer import AsyncClient

MAX_BATCH = 1000
ACTS = ("cancel", "resume", "retry")
# What a batch retry takes unless asked for more: runs that did not end well.
RETRIED = (RunState.FAILED, RunState.TIMED_OUT, RunState.EXHAUSTED, RunState.CANCELLED)
# Runs that did their work: retried again (their effects with them) only when named in ``include``.
ON_REQUEST = (RunState.SUCCEEDED, RunState.PARTIAL)


class BatchRefused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Batch:
    """A ``Batch`` is the runs of a list that an act applies to, as its confirmation shows them: the list's
    filter, the states a retry was asked to include, the runs taken and, by state, those of the
    list left out."""

    act: str
    filter: dict[str, str]
    include: tuple[str, ...]
    runs: list[RunRecord]
    left_out: dict[str, int]

    @property
    def states(self) -> dict[str, int]:
        """How many runs of each state the act takes, in the states' order."""
        return _by_state(Counter(str(r.state) for r in self.runs))

    @property
    def digest(self) -> str:
        """What the confirmation binds: the act and the ids of the runs it takes, in one hash
        (the order of the list does not matter, its members do)."""
        said = json.dumps([self.act, sorted(r.id for r in self.runs)])
        return hashlib.sha256(said.encode()).hexdigest()

    def confirmation(self) -> dict[str, Any]:
        """The confirmation as the API answers it; posting ``count`` and ``digest`` back acts."""
        return {
            "act": self.act,
            "filter": self.filter,
            "include": list(self.include),
            "count": len(self.runs),
            "states": self.states,
            "left_out": self.left_out,
            "digest": self.digest,
            "runs": [r.id for r in self.runs],
        }


def _by_state(counts: Counter[str]) -> dict[str, int]:
    return {str(s): counts[s] for s in RunState if counts[s]}


def included(act: str, values: Iterable[str]) -> tuple[str, ...]:
    """The states ``include`` names (repeated, or comma-separated): only a retry's, and only
    succeeded or partial (the others are taken anyway, or are no retry's)."""
    names = sorted({v.strip() for value in values for v in value.split(",") if v.strip()})
    if names and act != "retry":
        raise BatchRefused(400, f"include applies to a retry only, not to {act[:40]}")
    allowed = [str(s) for s in ON_REQUEST]
    wrong = [n for n in names if n not in allowed]
    if wrong:
        raise BatchRefused(
            400,
            f"include takes {' or '.join(allowed)} (a retry takes {', '.join(RETRIED)} anyway), "
            f"not {wrong[0][:40]!r}",
        )
    return tuple(names)


def _fits(act: str, run: RunRecord, include: tuple[str, ...]) -> bool:
    """Whether ``act`` applies to the run: cancel an unfinished one, resume a waiting one, retry
    one that ended without doing its work (as its continuation), or one whose state is included."""
    if act == "cancel":
        return not run.final
    if act == "resume":
        return run.state == RunState.WAITING
    return run.state in RETRIED or run.state in include


async def targets(c: AsyncClient, act: str, q: Mapping[str, str], include: tuple[str, ...] = ()) -> Batch:
    """The runs of the list ``q`` that ``act`` applies to, every page of it."""
    if act not in ACTS:
        raise BatchRefused(404, f"no batch action '{act[:40]}' ({', '.join(ACTS)})")
    query, found, cursor, left_out = lists.run_query(q), [], None, Counter[str]()
    while True:
        page, cursor = await c.runs_page(query, limit=500, cursor=cursor)
        for run in page:
            if _fits(act, run, include):
                found.append(run)
            else:
                left_out[str(run.state)] += 1
        if len(found) > MAX_BATCH:
            raise BatchRefused(400, f"more than {MAX_BATCH} runs match: narrow the filter")
        if cursor is None:
            return Batch(act, lists.kept(q), include, found, _by_state(left_out))


async def run_batch(
    c: AsyncClient,
    who: Principal,
    act: str,
    q: Mapping[str, str],
    include: tuple[str, ...],
    confirmed: tuple[int, str],
) -> dict[str, Any]:
    """Act on the list's runs as ``who`` (each recorded in the run's events), if they are still
    the ones confirmed (``confirmed``: the confirmation's count and digest); what was done and
    what was refused, by run."""
    batch = await targets(c, act, q, include)
    count, digest = confirmed
    if len(batch.runs) != count:
        raise BatchRefused(
            409,
            f"{len(batch.runs)} runs match now, not the {count} confirmed: the list changed since "
            "the confirmation; nothing was done, review it again",
        )
    if batch.digest != digest:
        raise BatchRefused(
            409,
            f"the {count} runs that match now are not the ones confirmed (runs left the list and "
            "others joined it): nothing was done, review it again",
        )
    done, refused = [], {}
    for run in batch.runs:
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
