"""A ``RunQuery`` says what a runs list asks for: its filters, its sort, and the opaque cursor that
carries a page's end to the next (keyset paging, migration 0020). Shared by the client, the
dashboard and the CLI."""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

from outlast._journal import canonical, storable
from outlast._model import PRIORITIES, RunState
from outlast.errors import InvalidInput

SORTS = ("created", "started", "finished")  # newest first; an id prefix lists by id instead
MAX_PAGE = 10_000  # as many as a list ever gave (the client's MAX_LIST)
PAGE = 50  # the runs a page shows (the dashboard, /api/runs and `outlast runs` by default)
SEARCH_VALUES = 16  # the values an input search names at most (each one more posting list read)
COUNTED = 10_000  # runs counted per state at most: a larger count is shown as "10,000+"


@dataclass(frozen=True)
class RunQuery:
    """A ``RunQuery`` asks for a runs list. Each filter given narrows it; ``since``/``until`` bound
    the sort's time (created, by default); ``id_prefix`` lists the runs whose id starts so, in id
    order; ``input`` the runs whose input contains that JSON object."""

    state: str | None = None
    workflow: str | None = None
    queue: str | None = None
    tenant: str | None = None
    priority: str | None = None
    parent: str | None = None  # the run that started them (child runs)
    in_doubt: bool = False  # only runs with an operation in doubt
    since: datetime | None = None
    until: datetime | None = None
    id_prefix: str | None = None
    input: dict[str, Any] = field(default_factory=dict)
    sort: str = "created"

    def __post_init__(self) -> None:
        if self.state is not None and self.state not in set(RunState):
            raise InvalidInput(f"no run state '{self.state}' (states: {', '.join(RunState)})")
        if self.priority is not None and self.priority not in PRIORITIES:
            raise InvalidInput(f"no priority '{self.priority}' (priorities: {', '.join(PRIORITIES)})")
        if self.sort not in SORTS:
            raise InvalidInput(f"no sort '{self.sort}' (sorts: {', '.join(SORTS)})")
        if not isinstance(self.input, dict):
            raise InvalidInput(f"an input search is a JSON object, got {type(self.input).__name__}")
        if self.input:  # what Postgres cannot hold (NaN, NUL, a lone surrogate) it cannot look for
            try:
                canonical(self.input)
            except InvalidInput as exc:
                raise InvalidInput(f"the input search is refused: {exc}") from None
        check_search(self.input)
        for name in ("since", "until"):
            at = getattr(self, name)
            if at is not None and (not isinstance(at, datetime) or at.tzinfo is None):
                raise InvalidInput(f"{name} must be a timezone-aware time, got {at!r}")

    @property
    def key(self) -> str:
        """The column a page is ordered by (then the id)."""
        return "id" if self.id_prefix else f"{self.sort}_at"

    def given(self) -> dict[str, Any]:
        """The filters that narrow the list, by name (the sort aside)."""
        named = (f.name for f in fields(self) if f.name != "sort")
        return {name: getattr(self, name) for name in named if getattr(self, name)}


def check_search(wanted: dict[str, Any]) -> None:
    """Refuse an input search that the index on the runs' input (``runs_by_input``, GIN
    ``jsonb_path_ops``) cannot serve, or only at the cost of many posting lists: that index finds
    the runs holding each value the search names, a scalar at the end of its path; an empty
    object or array names none, and the search would read every run. (``{}`` alone is no search.)"""
    values, todo = 0, [("", wanted)]  # iterative: a search may nest deeper than Python recurses
    while todo:
        path, value = todo.pop()
        if isinstance(value, dict | list):
            if not value and path:
                raise InvalidInput(
                    f"an input search must end each path in a value (a string, number, true, false "
                    f"or null), not an empty object or array: {path[:60]} has none, and it would read "
                    "every run (no index finds it)"
                )
            items = value.items() if isinstance(value, dict) else enumerate(value)
            todo.extend((f"{path}.{k}" if path else str(k), v) for k, v in items)
        else:
            values += 1
    if values > SEARCH_VALUES:
        raise InvalidInput(
            f"an input search names {SEARCH_VALUES} values at most, got {values}: each is one more "
            "lookup in the index on the runs' input"
        )


def cursor_of(query: RunQuery, row: dict[str, Any]) -> str:
    """The cursor after ``row``: the sort's key and the id, opaque to the caller."""
    at = row.get(query.key) if query.key != "id" else None
    raw = json.dumps([query.key, at.isoformat() if isinstance(at, datetime) else None, row["id"]])
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def after_of(query: RunQuery, cursor: str | None) -> tuple[datetime | None, str | None]:
    """The key and id a page starts after, or ``InvalidInput`` for a cursor of another sort or none
    this code made."""
    if not cursor:
        return None, None
    try:
        key, at, run_id = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        when = None if at is None else datetime.fromisoformat(at)
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError):
        raise InvalidInput(
            f"the cursor {cursor[:40]!r} is not one this list gave; start again without it"
        ) from None
    if not isinstance(run_id, str) or storable(run_id) != run_id:  # a NUL or a lone surrogate
        raise InvalidInput(f"the cursor {cursor[:40]!r} is not one this list gave; start again without it")
    if key != query.key or (when is None) != (key == "id"):
        raise InvalidInput("the cursor belongs to another sort or search; start again without it")
    return when, run_id
