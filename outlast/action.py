"""``current_action()`` tells a running tool what it can know about its own call."""

from __future__ import annotations

import contextvars
from dataclasses import dataclass, field
from typing import Any, Final


@dataclass(frozen=True)
class Action:
    """An ``Action`` is the identity of one operation: stable across every resume of the run."""

    run_id: str
    operation_id: str
    tool: str
    idempotency_key: str
    fencing_token: int
    charges: dict[str, float] = field(default_factory=dict, compare=False)
    captured: list[Any] = field(default_factory=list, compare=False, repr=False)

    def charge(self, **amounts: float) -> None:
        """Report the actual cost of this call (e.g. ``charge(usd=0.02, tokens=812)``); it
        replaces the tool's estimate in the run's budget once the result is committed."""
        for name, amount in amounts.items():
            self.charges[name] = self.charges.get(name, 0.0) + float(amount)

    def capture(self, request: Any) -> None:
        """Keep ``request`` (any JSON value: the body sent, or a dict of URL, headers and body)
        exactly as it leaves the process, at the last point before the call goes out: a model
        tool calls this with what the model receives, after the prompt's assembly, retrieval,
        compaction and any middleware. It is journaled with the operation, before its result,
        with the call's secret argument values masked; the last capture of a dispatch is kept
        (a retry's request replaces the one before). Shown by ``outlast status RUN --op OP``,
        the run's page and the debug bundle."""
        self.captured.append(request)


class _NotExecuted:
    def __repr__(self) -> str:
        return "NOT_EXECUTED"


NOT_EXECUTED: Final = _NotExecuted()
"""A reconciler's answer when it knows the action did not happen."""

_current: contextvars.ContextVar[Action] = contextvars.ContextVar("outlast_action")


def current_action() -> Action:
    """The action of the tool running now (inside a tool or reconciler only)."""
    try:
        return _current.get()
    except LookupError:
        raise RuntimeError("current_action() is only available inside a tool or a reconciler") from None


def set_action(action: Action) -> contextvars.Token[Action]:
    return _current.set(action)


def reset_action(token: contextvars.Token[Action]) -> None:
    _current.reset(token)
