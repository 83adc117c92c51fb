"""App: the registry of workflows, tools and reconcilers a worker serves."""

from __future__ import annotations

import asyncio
import hashlib
import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import pydantic
import tenacity

from outlast.action import Action
from outlast.errors import InvalidInput, UnknownTool, UnknownWorkflow

Effect = Literal["write", "read"]


@dataclass(frozen=True)
class Retry:
    """Retry transient failures inside one crossing, with the same idempotency key."""

    attempts: int = 3
    wait: float = 0.1
    max_wait: float = 2.0
    on: tuple[type[BaseException], ...] = (ConnectionError, TimeoutError)

    def policy(self) -> tenacity.AsyncRetrying:
        return tenacity.AsyncRetrying(
            stop=tenacity.stop_after_attempt(self.attempts),
            wait=tenacity.wait_exponential(multiplier=self.wait, max=self.max_wait),
            retry=tenacity.retry_if_exception_type(self.on),
            reraise=True,
        )


@dataclass(frozen=True)
class Tool:
    """A registered tool: what it is, and how far a repeat of it can be trusted."""

    name: str
    fn: Callable[..., Any]
    effect: Effect = "write"
    idempotent: bool = False
    retry: Retry | None = None
    args_model: type[pydantic.BaseModel] = field(default=pydantic.BaseModel)
    cost: dict[str, float] = field(default_factory=dict)  # the estimate reserved before dispatch

    def validate(self, args: dict[str, Any]) -> dict[str, Any]:
        """Check the call against the tool's type hints before anything is written."""
        try:
            model = self.args_model.model_validate(args)
        except pydantic.ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or '(args)'}: {e['msg']}" for e in exc.errors()
            )
            raise InvalidInput(f"invalid call to tool '{self.name}': {problems}") from None
        return model.model_dump(mode="json")

    async def invoke(self, args: dict[str, Any]) -> Any:
        """Run the tool once (sync tools in a thread), retrying per its policy."""
        if self.retry is None:
            return await self._once(args)
        async for attempt in self.retry.policy():
            with attempt:
                return await self._once(args)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _once(self, args: dict[str, Any]) -> Any:
        if inspect.iscoroutinefunction(self.fn):
            return await self.fn(**args)
        return await asyncio.to_thread(self.fn, **args)


Reconciler = Callable[[dict[str, Any], Action], Any]
Compensation = Callable[[dict[str, Any], Any], Any]
Policy = Callable[[str, dict[str, Any], Any], Any]
CompensateOn = Literal["cancel", "failure"]


@dataclass(frozen=True)
class Workflow:
    """A registered workflow and the identity of its program."""

    name: str
    fn: Callable[..., Awaitable[Any]]
    version: str
    fingerprint: str
    compensate_on: tuple[CompensateOn, ...] = ()

    @property
    def program(self) -> str:
        return f"{self.version}:{self.fingerprint[:16]}"


def fingerprint(fn: Callable[..., Any]) -> str:
    """A hash of the function's source (its bytecode where the source is not at hand)."""
    try:
        text = inspect.getsource(fn).encode()
    except (OSError, TypeError):
        text = fn.__code__.co_code
    return hashlib.sha256(text).hexdigest()


def _args_model(name: str, fn: Callable[..., Any]) -> type[pydantic.BaseModel]:
    fields: dict[str, Any] = {}
    for p in inspect.signature(fn).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        ann = Any if p.annotation is inspect.Parameter.empty else p.annotation
        fields[p.name] = (ann, ... if p.default is inspect.Parameter.empty else p.default)
    config = pydantic.ConfigDict(extra="forbid", arbitrary_types_allowed=True)
    return pydantic.create_model(f"{name}_args", __config__=config, **fields)


class App:
    """Register workflows, tools and reconcilers; a worker serves one App."""

    def __init__(self) -> None:
        self.workflows: dict[str, Workflow] = {}
        self.tools: dict[str, Tool] = {}
        self.reconcilers: dict[str, Reconciler] = {}
        self.compensations: dict[str, Tool] = {}
        self.policy_hook: Policy | None = None

    def workflow(
        self,
        name: str | None = None,
        *,
        version: str = "1",
        compensate_on: tuple[CompensateOn, ...] = (),
    ) -> Callable[[Callable[..., Awaitable[Any]]], Callable[..., Awaitable[Any]]]:
        """Register an ``async def`` workflow taking ``run`` and the run's input as keywords.
        ``compensate_on=("cancel", "failure")`` runs the compensations of its completed
        operations, newest first, before the run ends ``cancelled`` / ``failed``."""

        def register(fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
            if not inspect.iscoroutinefunction(fn):
                raise TypeError(f"workflow {fn.__name__!r} must be an async def")
            wf = Workflow(name or fn.__name__, fn, version, fingerprint(fn), tuple(compensate_on))
            self.workflows[wf.name] = wf
            return fn

        return register

    def tool(
        self,
        name: str | None = None,
        *,
        effect: Effect = "write",
        idempotent: bool = False,
        retry: Retry | None = None,
        cost: dict[str, float] | None = None,
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Register a tool. ``effect="read"`` is redone freely; ``idempotent=True`` is the host's
        promise that a repeat with the same idempotency key has no second effect. ``cost`` is the
        estimate reserved from the run's budget before each dispatch (the tool may report the
        actual with ``current_action().charge(...)``)."""

        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            tool_name = name or fn.__name__
            model = _args_model(tool_name, fn)
            self.tools[tool_name] = Tool(tool_name, fn, effect, idempotent, retry, model, dict(cost or {}))
            return fn

        return register

    def compensation(self, tool: str, *, idempotent: bool = False) -> Callable[[Compensation], Compensation]:
        """Register the undo/offset step of ``tool``: called as ``fn(args, result)`` with the
        completed operation's arguments and result, as a journaled operation of its own."""

        def register(fn: Compensation) -> Compensation:
            name = f"compensate:{tool}"
            config = pydantic.ConfigDict(arbitrary_types_allowed=True)
            model = pydantic.create_model(
                f"{tool}_compensation", __config__=config, args=(Any, ...), result=(Any, None)
            )
            self.compensations[tool] = Tool(name, fn, "write", idempotent, None, model)
            return fn

        return register

    def policy(self, fn: Policy) -> Policy:
        """Register the hook called before every dispatch as ``fn(action, args, run)``: return
        True or None to allow; False or a reason (str) to refuse (``PolicyRefused``)."""
        self.policy_hook = fn
        return fn

    def reconciler(self, tool: str) -> Callable[[Reconciler], Reconciler]:
        """Register how to ask the world whether an interrupted call of ``tool`` happened: return
        its result, or ``NOT_EXECUTED``; raise when unsure (never guess)."""

        def register(fn: Reconciler) -> Reconciler:
            self.reconcilers[tool] = fn
            return fn

        return register

    def get_workflow(self, name: str) -> Workflow:
        try:
            return self.workflows[name]
        except KeyError:
            known = ", ".join(sorted(self.workflows)) or "none"
            raise UnknownWorkflow(f"unknown workflow '{name}' (this app has: {known})") from None

    def get_tool(self, name: str) -> Tool:
        try:
            return self.tools[name]
        except KeyError:
            known = ", ".join(sorted(self.tools)) or "none"
            raise UnknownTool(f"unknown tool '{name}' (this app has: {known})") from None

    def programs(self) -> dict[str, str]:
        return {name: wf.program for name, wf in self.workflows.items()}
