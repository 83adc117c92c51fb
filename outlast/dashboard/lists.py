"""The runs list's query string is shared by the page (``/``) and the API (``/api/runs``): its
filters, sort and cursor read into a ``RunQuery``, and a page of runs as the API answers it. The
cursors the dashboard gives are signed and bound to their list and its filters (``sealed``): a
cursor of another list, of other filters, or one altered or made up, is refused."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import fields
from datetime import UTC, datetime
from typing import Any

from outlast._journal import MAX_DEPTH
from outlast._listing import COUNTED, PAGE, RunQuery
from outlast._model import RunRecord
from outlast.dashboard.auth import Gate, same
from outlast.errors import InvalidInput
from outlast.producer import AsyncClient

TEXT = ("state", "workflow", "queue", "tenant", "priority", "parent")
PARAMS = (*TEXT, "in_doubt", "since", "until", "prefix", "input", "sort")
SIGNED = 32  # hex digits of a cursor's signature kept: 128 bits


def _time(text: str, name: str) -> datetime | None:
    """An ISO 8601 time (a date, or a time without a zone, is taken as UTC)."""
    if not text:
        return None
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        raise InvalidInput(
            f"{name} must be an ISO 8601 time (2026-12-01T09:30Z), got {text[:40]!r}"
        ) from None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def _input(text: str) -> dict[str, Any]:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:  # not JSON, or a number of thousands of digits
        raise InvalidInput(f"input must be a JSON object to look for, got {text[:40]!r}") from None
    except RecursionError:
        raise InvalidInput(f"input is nested too deep: a JSON object of at most {MAX_DEPTH} levels") from None
    if not isinstance(value, dict):
        raise InvalidInput(f'input must be a JSON object (e.g. {{"customer": "c-42"}}), got {text[:40]!r}')
    return value


def run_query(q: Mapping[str, str]) -> RunQuery:
    """The list the query string asks for; ``InvalidInput`` (a 400) naming the bad parameter."""
    return RunQuery(
        **{name: q.get(name) or None for name in TEXT},
        in_doubt=q.get("in_doubt", "") in ("1", "true", "on"),
        since=_time(q.get("since", ""), "since"),
        until=_time(q.get("until", ""), "until"),
        id_prefix=q.get("prefix") or None,
        input=_input(q.get("input", "")),
        sort=q.get("sort") or "created",
    )


def kept(q: Mapping[str, str]) -> dict[str, str]:
    """The list's parameters given, to carry into the next page's link."""
    return {name: q[name] for name in PARAMS if q.get(name)}


def duration(run: RunRecord) -> float | None:
    """Seconds from its start (or creation) to its end; None while it goes on."""
    if run.finished_at is None:
        return None
    return (run.finished_at - (run.started_at or run.created_at)).total_seconds()


def counts_shown(counts: dict[str, int]) -> dict[str, str]:
    """Each state's count as the runs page shows it: "10,000+" past what is counted."""
    return {state: f"{COUNTED:,}+" if n > COUNTED else str(n) for state, n in counts.items()}


def counts_answer(counts: dict[str, int]) -> dict[str, Any]:
    """The counts as /api/runs answers them: ``counts`` up to COUNTED each, and ``counts_capped``
    the states that have more runs than that."""
    return {
        "counts": {state: min(n, COUNTED) for state, n in counts.items()},
        "counts_capped": sorted(state for state, n in counts.items() if n > COUNTED),
    }


def bound_to(name: str, query: RunQuery) -> str:
    """What a cursor is bound to: the list (``runs``, ``in-doubt``) and its query, filters and
    sort, as one text (a time as ISO 8601, whatever way it was written)."""
    said = {f.name: getattr(query, f.name) for f in fields(query)}
    return name + " " + json.dumps(said, sort_keys=True, default=datetime.isoformat)


async def sealed(gate: Gate, cursor: str | None, bound: str) -> str | None:
    """The client's cursor, signed with the dashboard's cursor key together with what it is
    bound to: ``CURSOR.SIGNATURE``."""
    if cursor is None:
        return None
    return cursor + "." + (await gate.sign(bound + " " + cursor, key="cursor"))[:SIGNED]


async def opened(gate: Gate, given: str | None, bound: str) -> str | None:
    """The client's cursor inside ``given``, or ``InvalidInput`` (a 400) when the dashboard did
    not give it for this list and these filters."""
    if not given:
        return None
    cursor, _, signature = given.rpartition(".")
    if not (cursor and same(signature, (await gate.sign(bound + " " + cursor, key="cursor"))[:SIGNED])):
        raise InvalidInput(
            f"the cursor {given[:40]!r} was not given by this list with these filters (or was "
            "altered): start from the first page, without it"
        )
    return cursor


async def page_of(
    c: AsyncClient, gate: Gate, q: Mapping[str, str], limit: int = PAGE
) -> tuple[list[RunRecord], str | None]:
    """A page of the runs list the query string asks for, and the next page's signed cursor."""
    query = run_query(q)
    bound = bound_to("runs", query)
    runs, cursor = await c.runs_page(query, limit=limit, cursor=await opened(gate, q.get("cursor"), bound))
    return runs, await sealed(gate, cursor, bound)
