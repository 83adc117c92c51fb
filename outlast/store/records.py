"""This module holds what the store's methods return or take besides runs: plain frozen records."""

from __future__ import annotations

from dataclasses import astuple, dataclass
from datetime import datetime
from typing import Any, NamedTuple

from outlast._model import RunRecord


@dataclass(frozen=True)
class OnWait:
    """``OnWait`` says who appends to a run no worker holds: it waits for ``reason`` and its chain's head is
    ``prev`` (what the writer read)."""

    reason: str
    prev: str


@dataclass(frozen=True)
class ChildStart:
    """``ChildStart`` says what starting a child run found: the parent's lease ``held`` (else fenced), its
    ``cancel_requested``, whether the child was ``created`` (else it exists already, or was
    refused), and whether it was ``held_back`` for its tenant's turn (not to be published now)."""

    held: bool
    cancel_requested: bool
    created: bool
    held_back: bool = False


class Claimed(NamedTuple):
    """``Claimed`` is a claim: the run under its new token, the database clock then, and the run (id, queue,
    priority) whose turn it made, published by the claim: its stream entry is the claimer's to add; and
    the pauses that hold the run, if any (it is parked before its workflow runs)."""

    run: RunRecord
    db_now: datetime
    turn: tuple[str, str, str] | None = None
    paused: list[dict[str, Any]] | None = None  # the operator's pauses that hold it (pauses.py)


@dataclass(frozen=True)
class Lease:
    """``Lease`` holds what a heartbeat learnt of one lease."""

    renewed: bool
    lost: bool  # another worker holds a newer fencing token
    cancel_requested: bool
    paused: bool = False  # an operator's pause holds the run: it stops at its next crossing


@dataclass(frozen=True)
class Pruned:
    """``Pruned`` says what a prune deleted (or, counted, would delete): runs and the rows that were theirs;
    budgets are counted by id."""

    runs: int = 0
    journal: int = 0
    events: int = 0
    approvals: int = 0
    reservations: int = 0
    budgets: int = 0
    artifacts: int = 0  # those saved with keep=True stay

    def __add__(self, other: Pruned) -> Pruned:
        return Pruned(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))
