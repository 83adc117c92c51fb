"""This module defines run states and the records outlast hands to its users."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, Generic, TypeVar

T = TypeVar("T")

# A run's priority levels, highest first: a queue has one stream for each (``queue.entries``).
PRIORITIES = ("high", "normal", "low")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def incarnation(created_at: datetime) -> int:
    """A run's incarnation, which its callback tokens bind: its row's creation time, in whole
    microseconds (a run pruned and made again under the same id is another incarnation)."""
    return (created_at - _EPOCH) // timedelta(microseconds=1)


class RunState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    WAITING = "waiting"  # reason: timer, in_doubt, program_changed, journal_altered, ...
    AWAITING_APPROVAL = "awaiting_approval"
    CANCELLING = "cancelling"
    SUCCEEDED = "succeeded"
    PARTIAL = "partial"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    EXHAUSTED = "exhausted"
    CANCELLED = "cancelled"

    @property
    def final(self) -> bool:
        return self in FINAL_STATES


FINAL_STATES = frozenset(
    {
        RunState.SUCCEEDED,
        RunState.PARTIAL,
        RunState.FAILED,
        RunState.TIMED_OUT,
        RunState.EXHAUSTED,
        RunState.CANCELLED,
    }
)


@dataclass(frozen=True, slots=True)  # slots: 34 fields are past the dict key sharing (1.6 -> 0.3 KB a run)
class RunRecord:
    """A ``RunRecord`` is a run as Postgres knows it."""

    id: str
    workflow: str
    queue: str
    input: dict[str, Any]
    state: RunState
    reason: str | None
    result: Any
    error: dict[str, Any] | None
    program: str | None
    fencing_token: int
    owner: str | None
    lease_expires_at: datetime | None
    attempts: int
    deadline: datetime | None
    cancel_requested: bool
    budget_id: str | None
    parent_id: str | None
    journal_head: str
    journal_len: int
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    trace_context: dict[str, str] | None = None  # the producer's trace, continued by every attempt
    start_at: datetime | None = None  # a delayed run is not delivered before this time
    priority: str = "normal"  # the level of its queue it is published to: high, normal or low
    tenant: str | None = None  # whose run: kept by continuations and child runs
    started_by: str | None = None  # the parent run whose operation started this child run
    waits_for: str | None = None  # the child run it waits for (state waiting, reason child)
    held_back: bool = False  # queued, in no stream until its tenant's turn (fair share)
    started_at: datetime | None = None  # when a worker first took it (0020)
    generation: int = 0  # its journal's current generation: how often it carried forward (0030)
    op_base: int = 0  # the operations of its earlier generations: this one's are numbered on
    journal_bytes: int = 0  # the bytes of journal it wrote, every generation (0032; from then on)
    size_warned_at: datetime | None = None  # when it passed OUTLAST_RUN_SIZE_WARN (0032)

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> RunRecord:
        return cls(
            id=row["id"],
            workflow=row["workflow"],
            queue=row["queue"],
            # the input its current generation started with (carried forward), else as enqueued
            input=row["input"] if row.get("carried") is None else row["carried"],
            state=RunState(row["state"]),
            reason=row["reason"],
            result=row["result"],
            error=row["error"],
            program=row["program"],
            fencing_token=row["fencing_token"],
            owner=row["owner"],
            lease_expires_at=row["lease_expires_at"],
            attempts=row["attempts"],
            deadline=row["deadline"],
            cancel_requested=row["cancel_requested"],
            budget_id=row["budget_id"],
            parent_id=row["parent_id"],
            journal_head=row["journal_head"],
            journal_len=row["journal_len"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
            finished_at=row["finished_at"],
            priority=row.get("priority", "normal"),
            trace_context=row.get("trace_context"),
            start_at=row.get("start_at"),
            tenant=row.get("tenant"),
            started_by=row.get("started_by"),
            waits_for=row.get("waits_for"),
            started_at=row.get("started_at"),
            generation=row.get("generation", 0),
            op_base=row.get("op_base", 0),
            journal_bytes=row.get("journal_bytes", 0),
            size_warned_at=row.get("size_warned_at"),
            held_back=row["state"] == "queued" and "published_at" in row and row["published_at"] is None,
        )

    @property
    def final(self) -> bool:
        return self.state.final

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            v = getattr(self, f.name)
            out[f.name] = v.isoformat() if isinstance(v, datetime) else v
        out["state"] = str(self.state)
        return out


@dataclass(frozen=True)
class Decision:
    """A ``Decision`` is what people decided about an approval request: ``approved``, or ``revised``
    with new arguments (acting on them needs an approval of their own)."""

    approval_id: str
    status: str
    approver: str
    comment: str
    args: dict[str, Any]

    @property
    def approved(self) -> bool:
        return self.status == "approved"


@dataclass(frozen=True)
class Answered:
    """What ``respond`` did: the answer that stands for the request (``value``, by ``by``), and
    ``again``: True when this was the same answer sent again (accepted, nothing changed)."""

    run_id: str
    request_id: str
    value: Any
    by: str
    again: bool


@dataclass(frozen=True)
class Partial(Generic[T]):
    """A workflow that accepts partial results returns a ``Partial`` when it produced part of its output.
    The run ends ``partial`` with ``{"output": output, "unfinished": unfinished}`` as its result.
    ``unfinished`` says what was not done (any JSON values: names, ids, reasons)."""

    output: T
    unfinished: list[Any] = field(default_factory=list)

    def result(self) -> dict[str, Any]:
        """The run's result: what was produced and what is unfinished."""
        return {"output": self.output, "unfinished": list(self.unfinished)}


@dataclass(frozen=True)
class StateValue:
    """One key of a run's state: its value, its version (1, then one more each set) and the
    journal entry that set it."""

    key: str
    value: Any
    version: int
    seq: int


@dataclass(frozen=True)
class Chunk:
    """One live chunk: what was streamed, by which operation (None: the workflow), and its id in
    the run's live stream."""

    data: Any
    op: str | None
    id: str


@dataclass(frozen=True)
class Receipt:
    """A message accepted into a run's inbox (``send``): kept until the run takes it.
    ``duplicate``: a message with this id was sent before, and this is its receipt (nothing new
    was stored). ``unheard``: the run does not wait on this channel now, its workflow declares no
    channels and it never took a message on this one: kept untaken until a receive on it, if any."""

    run_id: str
    channel: str
    message_id: str
    seq: int  # the run's n-th message accepted: the order it is taken in, per channel
    sent_at: datetime
    duplicate: bool = False
    unheard: bool = False
