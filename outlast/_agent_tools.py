"""This module holds what the agent integrations declare of a tool, whatever the framework.

A tool's effect (``ToolEffect``: ``read``, ``idempotent``, ``reconciled``, ``plain``), who approves
its calls (``Approval``, asked with ``approved``), and the effect an MCP server's annotations
declare (``mcp_effect``, over ``_mcp.py``). ``outlast.agents`` (pydantic-ai) and
``outlast.integrations.openai_agents`` build on it; it imports neither framework."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from outlast._mcp import mcp_effect_name
from outlast.app import Reconciler, Retry
from outlast.errors import ApprovalExpired, ApprovalRejected

if TYPE_CHECKING:
    from outlast.worker.run import Run

EffectName = Literal["read", "idempotent", "reconciled", "plain"]


@dataclass(frozen=True)
class Approval:
    """Who must approve a call of the tool before it is made, and when: ``when(args)`` decides
    from the arguments the model proposed (None: every call). ``expires_in`` (seconds) and
    ``authenticated`` are ``run.approval``'s."""

    approvers: Sequence[str]
    when: Callable[[dict[str, Any]], bool] | None = None
    expires_in: float | None = None
    authenticated: bool = False

    def applies(self, args: dict[str, Any]) -> bool:
        return self.when is None or bool(self.when(args))


@dataclass(frozen=True)
class ToolEffect:
    """What a repeat of one agent tool would do (``read``, ``idempotent``, ``reconciled``,
    ``plain``), and the rest of its outlast declaration."""

    effect: EffectName = "plain"
    reconciler: Reconciler | None = None
    approval: Approval | None = None
    timeout: float | None = None
    retry: Retry | None = None
    cost: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if (self.effect == "reconciled") != (self.reconciler is not None):
            raise TypeError("a reconciled tool needs its reconciler, and only a reconciled tool has one")


def read(**kw: Any) -> ToolEffect:
    """A tool with no effect in the world: redone freely after a crash."""
    return ToolEffect("read", **kw)


def idempotent(**kw: Any) -> ToolEffect:
    """A tool the world ignores a repeat of, given the same ``current_action().idempotency_key``:
    dispatched again with the same key after a crash."""
    return ToolEffect("idempotent", **kw)


def reconciled(reconciler: Reconciler, **kw: Any) -> ToolEffect:
    """A plain tool with a reconciler (``fn(args, action)``) that asks the world whether an
    interrupted call happened (``outlast.NOT_EXECUTED``, or its result)."""
    return ToolEffect("reconciled", reconciler, **kw)


def plain(**kw: Any) -> ToolEffect:
    """A tool with no promise: an interrupted call is in doubt, never run again."""
    return ToolEffect("plain", **kw)


Declared = ToolEffect | EffectName


def mcp_effect(annotations: Mapping[str, Any] | None) -> ToolEffect:
    """The effect an MCP server's tool annotations declare (``_mcp.mcp_effect_name``, as pydantic-ai
    keeps them, in the tool definition's ``metadata["annotations"]``). Annotations are hints:
    ``tools=`` overrides them."""
    return ToolEffect(mcp_effect_name(annotations))


def declared(value: Declared) -> ToolEffect:
    if isinstance(value, ToolEffect):
        return value
    if value in ("read", "idempotent", "plain"):
        return ToolEffect(value)
    raise TypeError(f"a tool's effect is read, idempotent, plain or reconciled(fn), got {value!r}")


async def approved(run: Run, action: str, args: dict[str, Any], approval: Approval) -> dict[str, Any] | str:
    """The arguments people approved: the model's, or a revision of them (approved in its turn);
    or why the call is not made (what the model is told)."""
    try:
        while True:
            decision = await run.approval(
                action,
                args,
                approvers=list(approval.approvers),
                expires_in=approval.expires_in,
                authenticated=approval.authenticated,
            )
            if decision.approved:
                return args
            args = decision.args  # revised: acting on it needs an approval of its own
    except ApprovalRejected as exc:
        return f"This call was rejected by its approvers: {exc}"
    except ApprovalExpired as exc:
        return f"Nobody approved this call in time: {exc}"
