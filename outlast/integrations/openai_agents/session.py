"""``RunSession`` keeps an OpenAI Agents SDK conversation inside one outlast run.

It is the SDK's ``Session`` (``get_items``, ``add_items``, ``pop_item``, ``clear_session``) over a
list of the run's own, made in the workflow (``RunSession(run)``) and handed to
``DurableAgent.run(..., session=...)`` turn after turn: the SDK reads the conversation from it
before each turn and adds the turn's input and new items after it. Its items are not journaled
again: each comes from what the run already journals (the run's input, a message ``run.receive``
took, a model response, a tool's result), so a resumed run, which runs the workflow again from
its start, adds the same items in the same order as it replays each turn from the journal, and
the model is not asked again. A session kept outside the run (the SDK's ``SQLiteSession``, a
server's conversation) would be given each replayed turn's items a second time: ``DurableAgent``
refuses it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agents.memory.session import SessionABC

if TYPE_CHECKING:
    from outlast.worker.run import Run


class RunSession(SessionABC):
    """The conversation of ``run``'s agent turns, rebuilt by replay on a resume."""

    def __init__(self, run: Run, name: str = "conversation") -> None:
        self.run = run
        self.session_id = f"{run.id}:{name}"
        self.session_settings = None
        self.items: list[Any] = []

    async def get_items(self, limit: int | None = None) -> list[Any]:
        return list(self.items if limit is None else self.items[-limit:] if limit > 0 else [])

    async def add_items(self, items: list[Any]) -> None:
        self.items.extend(items)

    async def pop_item(self) -> Any | None:
        return self.items.pop() if self.items else None

    async def clear_session(self) -> None:
        self.items.clear()
