"""The producer checks these before anything is written: ids and names, JSON values, deadlines,
delays and budgets. Each refusal is ``InvalidInput`` naming whose value it is and why."""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Any

from outlast._journal import canonical
from outlast.errors import InvalidInput
from outlast.queue import MAX_RUN_ID

NO_INPUT: dict[str, Any] = {}  # enqueue's default, by identity: an omitted input is {}; None is refused
MAX_DEADLINE = 10 * 365 * 86400.0  # ten years, in seconds
MAX_LIST = 10_000


def show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def check_text(value: object, what: str, where: str, limit: int = 200) -> str:
    """An id or a name: 1 to ``limit`` printable characters (no NUL, newline or other control)."""
    if isinstance(value, str) and 0 < len(value) <= limit and value.isprintable():
        return value
    raise InvalidInput(
        f"{where + ': ' if where else ''}{what} must be 1 to {limit} printable characters "
        f"(no NUL, newline or other control character), got {show(value)}"
    )


# The safe set of a new run's id, said once (enqueue's docstring and README quote it).
RUN_ID_RULE = (
    f"a new run's id is 1 to {MAX_RUN_ID} printable characters without '/' or '\\', and not '.' or '..'"
)


def new_run_id_problem(run_id: str) -> str | None:
    """Why ``run_id`` (already 1 to ``MAX_RUN_ID`` printable characters) may not name a new run,
    or None. A run id becomes a directory name (an exported bundle, the dashboard's download)
    and a URL path segment (the dashboard), where a slash, a backslash, ``.`` or ``..`` would
    name another place. Runs recorded before this rule keep their ids everywhere."""
    if "/" in run_id or "\\" in run_id:
        return "contains a '/' or '\\'"
    if run_id in (".", ".."):
        return f"is {run_id!r}"
    return None


def check_json(value: Any, what: str, where: str, limit: int) -> str:
    """The canonical text of ``value``, or ``InvalidInput`` naming whose value it is and why."""
    try:
        return canonical(value, limit=limit)
    except InvalidInput as exc:
        raise InvalidInput(f"{where}: {what} is refused: {exc}") from None


def deadline_seconds(deadline: timedelta | float | None, where: str) -> float | None:
    if deadline is None:
        return None
    seconds = deadline.total_seconds() if isinstance(deadline, timedelta) else deadline
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not 0 < seconds <= MAX_DEADLINE:
        raise InvalidInput(
            f"{where}: the deadline must be a number of seconds in (0, {MAX_DEADLINE:.0f}] (ten years), "
            f"got {show(deadline)}"
        )
    return float(seconds)


def start_of(start_at: datetime | None, delay: timedelta | float | None, where: str) -> dict[str, Any]:
    """A delayed run's start, as the row's ``start_at`` (a timezone-aware datetime) or
    ``start_in`` (``delay`` seconds from now, by the database clock); not both."""
    if start_at is not None and delay is not None:
        raise InvalidInput(f"{where}: give start_at or delay, not both")
    if start_at is not None and (not isinstance(start_at, datetime) or start_at.tzinfo is None):
        raise InvalidInput(
            f"{where}: start_at must be a timezone-aware datetime (e.g. datetime.now(UTC)), "
            f"got {show(start_at)}"
        )
    seconds = delay.total_seconds() if isinstance(delay, timedelta) else delay
    if seconds is not None and (
        isinstance(seconds, bool) or not isinstance(seconds, int | float) or not 0 <= seconds <= MAX_DEADLINE
    ):
        raise InvalidInput(
            f"{where}: the delay must be a number of seconds in [0, ten years], got {show(delay)}"
        )
    return {"start_at": start_at, "start_in": None if seconds is None else float(seconds)}


def check_budget(budget: Any, where: str) -> None:
    if budget is None:
        return
    if not isinstance(budget, dict):
        raise InvalidInput(f"{where}: the budget must map names to limits, got {type(budget).__name__}")
    for name, limit in budget.items():
        check_text(name, "a budget's name", where, 100)
        number = isinstance(limit, int | float) and not isinstance(limit, bool)
        if not number or limit < 0 or (isinstance(limit, float) and not math.isfinite(limit)):
            raise InvalidInput(f"{where}: budget '{name}' must be a finite number >= 0, got {show(limit)}")
