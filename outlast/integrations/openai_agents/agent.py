"""``DurableAgent`` makes an OpenAI Agents SDK agent durable inside an outlast workflow.

``DurableAgent(app, "support", agent, tools={"refund": "idempotent"})`` registers, in ``app``,
the tool ``support:model`` (every model call of the agent and of the agents it hands off to) and
one tool ``support.TOOL`` per function tool of those agents, and keeps a copy of the agents whose
model and function tools go through them. ``await support.run(run, input)`` inside a workflow is
``Runner.run`` on that copy: each model call and each function tool call is then an operation of
the workflow's ``run``, journaled once and served from the journal on every resume.

What a tool may do twice is declared per tool, as for any outlast tool: ``"read"`` (no effect:
redone after a crash), ``"idempotent"`` (sent again with the same
``current_action().idempotency_key``), ``ToolEffect("reconciled", reconciler=fn)`` (the
reconciler says whether it happened), or ``"plain"``, the default: a call cut by a crash is in
doubt, never run twice, and the model is told its outcome is unknown. A tool's code reads
``current_action()``. A tool's result is journaled as JSON (what the model sees of it). An
agent's guardrails are calls of ``NAME:guardrail``, their verdicts journaled; a handoff is replayed
from the journaled response that makes it (its ``on_handoff`` run again).

A tool declared with ``approval=Approval(...)`` needs approval in the SDK: the run the SDK
interrupts for it waits for an outlast approval bound to the model's arguments (``run.approval``,
no worker held), then goes on from the SDK's ``RunState``. A conversation across turns is a
``RunSession`` (``session.py``) handed to each ``run``. The tools of the agents' MCP servers
are journaled as function tools are, of the effect their server's annotations declare
(``mcp_effect``) unless ``tools=`` says, each call carrying its operation's idempotency key in its
``_meta``. ``run_streamed`` is ``Runner.run_streamed``, each model call's text sent live, its
approvals waited for as ``run`` waits for them (``DurableStreaming``).
"""

from __future__ import annotations

import contextvars
import dataclasses
import inspect
import json
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any, Literal, cast

import pydantic
import pydantic_core
from agents import (
    Agent,
    FunctionTool,
    GuardrailFunctionOutput,
    RunConfig,
    Runner,
    RunResult,
    RunResultStreaming,
    RunState,
    ToolApprovalItem,
)
from agents.handoffs import Handoff
from agents.models.interface import Model
from agents.models.multi_provider import MultiProvider
from agents.tool_context import ToolContext

from outlast._agent_tools import (
    Approval,
    Declared,
    ToolEffect,
    approved,
    declared,
    mcp_effect,
)
from outlast._mcp import IDEMPOTENCY_KEY_META
from outlast.action import NOT_EXECUTED, Action, current_action
from outlast.app import App, Reconciler, Tool
from outlast.errors import InDoubt
from outlast.integrations.openai_agents.model import (
    SCOPE,
    JournaledModel,
    JournaledProvider,
    Scope,
    call,
    dispatched,
    not_executed,
)
from outlast.integrations.openai_agents.session import RunSession

if TYPE_CHECKING:
    from outlast.worker.run import Run

_FREE = pydantic.ConfigDict(extra="allow")


class DurableAgent:
    """An agent (and the agents it hands off to) whose model and tool calls are operations."""

    def __init__(
        self,
        app: App,
        name: str,
        agent: Agent[Any],
        *,
        tools: Mapping[str, Declared] | None = None,
        model_cost: Mapping[str, float] | None = None,
        usage_budget: str = "tokens",
    ) -> None:
        self.name = name
        self.usage_budget = usage_budget
        self.app = app
        self.tools = {k: declared(v) for k, v in (tools or {}).items()}
        self._mcp_registered: dict[str, ToolEffect] = {}
        self._copies: dict[int, Agent[Any]] = {}
        self.agent = self._durable(agent)
        found = {t.name for a in self._copies.values() for t in a.tools if isinstance(t, FunctionTool)}
        unknown = set(self.tools) - found
        if unknown and not any(a.mcp_servers for a in self._copies.values()):  # MCP tools: listed later
            raise ValueError(
                f"agent {name!r} has no function tool {sorted(unknown)}; its tools: {sorted(found)}"
            )
        unapproved = {
            t.name
            for a in self._copies.values()
            for t in a.tools
            if isinstance(t, FunctionTool) and t.needs_approval is not False
        } - {t for t, e in self.tools.items() if e.approval is not None}
        if unapproved:
            raise ValueError(
                f"agent {name!r}: tools {sorted(unapproved)} need approval: declare who approves them "
                "(tools={TOOL: ToolEffect(..., approval=Approval(approvers=[...]))})"
            )
        _register(
            app, f"{name}:model", ToolEffect("reconciled", not_executed), dict(model_cost or {}), "model"
        )
        _register(app, f"{name}:guardrail", ToolEffect("read"), {}, "tool")
        for tool in sorted(found):
            effect = self.tools.get(tool, ToolEffect())
            _register(app, self.tool_name(tool), effect, dict(effect.cost), "tool")

    def tool_name(self, tool: str) -> str:
        """The outlast tool a call of the agent's ``tool`` is (``run.in_doubt`` takes it)."""
        return f"{self.name}.{tool}"

    async def run(
        self, run: Run, input: Any, *, run_config: RunConfig | None = None, **kwargs: Any
    ) -> RunResult:
        """``Runner.run`` of the agent on ``input`` as part of the workflow's ``run``. A run the SDK
        interrupts for its tools' approvals waits for outlast approvals (``run.approval``, no worker
        held), each bound to the arguments the model proposed, then goes on: an approved call is
        made with the arguments approved (a revision approved in its turn), a rejected or expired
        one is not, and the model is told why."""
        _session_of(run, kwargs)
        scope = Scope(run, self.name, self.usage_budget)
        token = SCOPE.set(scope)
        try:
            config = _journaled(run_config)
            result = await Runner.run(self.agent, input, run_config=config, **kwargs)
            while result.interruptions:
                state = result.to_state()
                for item in result.interruptions:  # in the order the model made the calls
                    await self._decide(scope, state, item)
                kwargs.pop("context", None)  # the state carries it
                result = await Runner.run(self.agent, state, run_config=config, **kwargs)
            return result
        finally:
            SCOPE.reset(token)

    async def _decide(self, scope: Scope, state: RunState[Any], item: ToolApprovalItem) -> None:
        tool = item.name or ""
        approval = self.tools.get(tool, ToolEffect()).approval
        if approval is None:  # DurableAgent refuses such a tool at build: a tool added since
            raise ValueError(f"agent {self.name!r}: tool {tool!r} needs approval, and nobody approves it")
        try:
            args = json.loads(item.arguments or "{}")
        except ValueError:
            args = {"arguments": item.arguments}
        decided = await approved(scope.run, self.tool_name(tool), args, approval)
        if isinstance(decided, str):
            state.reject(item, rejection_message=decided)
        else:
            scope.approved[item.call_id or ""] = decided
            state.approve(item)

    def run_streamed(
        self, run: Run, input: Any, *, run_config: RunConfig | None = None, **kwargs: Any
    ) -> DurableStreaming:
        """``Runner.run_streamed`` of the agent on ``input`` as part of the workflow's ``run``: each
        model call is streamed, its text sent live to ``client.stream(run_id)`` as it comes, its
        completed response journaled. The workflow reads ``stream_events()`` to the end, then
        ``final_output``; a resumed run's events are the journaled responses alone, so the text
        already sent is not sent again. A run the SDK interrupts for its tools' approvals waits
        for them inside ``stream_events()`` as ``run`` does (no worker held), then streams on."""
        _session_of(run, kwargs)
        scope = Scope(run, self.name, self.usage_budget)
        config = _journaled(run_config)
        return DurableStreaming(self, scope, self._streamed(scope, input, config, kwargs), config, kwargs)

    def _streamed(
        self, scope: Scope, input: Any, config: RunConfig, kwargs: dict[str, Any]
    ) -> RunResultStreaming:
        token = SCOPE.set(scope)
        try:  # the SDK's run task is created here, and keeps this scope
            return Runner.run_streamed(self.agent, input, run_config=config, **kwargs)
        finally:
            SCOPE.reset(token)

    def _durable(self, agent: Agent[Any]) -> Agent[Any]:
        """A copy of ``agent`` whose model and function tools are journaled, and whose handoffs
        lead to such copies (each agent copied once, so a cycle of handoffs stays a cycle)."""
        if id(agent) in self._copies:
            return self._copies[id(agent)]
        model = agent.model
        copy = agent.clone(
            model=JournaledModel(model, type(model).__name__) if isinstance(model, Model) else model,
            tools=[self._tool(t) if isinstance(t, FunctionTool) else t for t in agent.tools],
            input_guardrails=[self._guardrail(g, "input") for g in agent.input_guardrails],
            output_guardrails=[self._guardrail(g, "output") for g in agent.output_guardrails],
        )
        self._copies[id(agent)] = copy
        if copy.mcp_servers:
            self._mcp_tools(copy)
        copy.handoffs = [
            self._durable(h) if isinstance(h, Agent) else self._handoff(h) for h in agent.handoffs
        ]
        return copy

    def _guardrail(self, guardrail: Any, kind: Literal["input", "output"]) -> Any:
        """A copy of an agent's guardrail whose check is a call of ``NAME:guardrail`` (a read:
        one cut by a crash is run again), its verdict journaled (``output_info`` as JSON) and
        served from the journal on a resume, so a guardrail that asks a model or a service does
        not ask it again. An input guardrail of the copy runs before the agent's first model call,
        not beside it, so that the two operations keep their order on a resume."""
        check = guardrail.guardrail_function
        name = guardrail.get_name()

        async def checked(ctx: Any, agent: Any, given: Any) -> GuardrailFunctionOutput:
            scope = SCOPE.get(None)

            async def verdict() -> GuardrailFunctionOutput:
                out = check(ctx, agent, given)
                return cast(GuardrailFunctionOutput, await out if inspect.isawaitable(out) else out)

            if scope is None:
                return await verdict()

            async def body(journaled: dict[str, Any]) -> Any:
                out = await verdict()
                info = pydantic_core.to_jsonable_python(out.output_info, fallback=str)
                return {"output_info": info, "tripwire_triggered": out.tripwire_triggered}

            args = {"guardrail": name, "kind": kind, "agent": agent.name}
            found = await call(scope.run, f"{self.name}:guardrail", args, body)
            return GuardrailFunctionOutput(found["output_info"], bool(found["tripwire_triggered"]))

        changes: dict[str, Any] = {"guardrail_function": checked, "name": name}
        if kind == "input":
            changes["run_in_parallel"] = False
        return dataclasses.replace(guardrail, **changes)

    def _handoff(self, handoff: Handoff[Any, Any]) -> Handoff[Any, Any]:
        invoke = handoff.on_invoke_handoff

        async def on_invoke(ctx: Any, raw: str) -> Agent[Any]:
            return self._durable(await invoke(ctx, raw))

        return dataclasses.replace(handoff, on_invoke_handoff=on_invoke)

    def _mcp_tools(self, copy: Agent[Any]) -> None:
        """Make the MCP tools ``copy`` lists at each turn (``Agent.get_mcp_tools``) journaled, each
        a call of the outlast tool ``NAME.TOOL`` of the effect declared in ``tools=``, else by its
        server's annotations (``mcp_effect``), registered as it is listed; and make each call
        carry its operation's idempotency key in its ``_meta`` (``IDEMPOTENCY_KEY_META``)."""
        for server in copy.mcp_servers:
            _send_keys(server)
        listed = copy.get_mcp_tools

        async def get_mcp_tools(run_context: Any) -> list[Any]:
            tools = await listed(run_context)
            return [self._mcp_tool(t) if isinstance(t, FunctionTool) else t for t in tools]

        copy.get_mcp_tools = get_mcp_tools  # type: ignore[method-assign]

    def _mcp_tool(self, tool: FunctionTool) -> FunctionTool:
        name = self.tool_name(tool.name)
        effect = self.tools.get(tool.name) or mcp_effect(_hints(getattr(tool, "_mcp_annotations", None)))
        if self._mcp_registered.get(name) != effect:
            _register(self.app, name, effect, dict(effect.cost), "tool")
            self._mcp_registered[name] = effect
        return self._tool(tool, mcp=True)

    def _tool(self, tool: FunctionTool, *, mcp: bool = False) -> FunctionTool:
        invoke = tool.on_invoke_tool
        name = self.tool_name(tool.name)

        async def on_invoke(ctx: ToolContext[Any], raw: str) -> Any:
            scope = SCOPE.get(None)
            try:
                args = json.loads(raw or "{}")
            except ValueError:
                args = None
            if scope is None or not isinstance(args, dict):
                return await invoke(ctx, raw)  # outside a run, or arguments the tool refuses itself
            args = scope.approved.pop(ctx.tool_call_id, args)  # the arguments people approved

            async def body(journaled: dict[str, Any]) -> Any:
                key = MCP_KEY.set(current_action().idempotency_key) if mcp else None
                try:
                    return pydantic_core.to_jsonable_python(
                        await invoke(ctx, json.dumps(journaled)), fallback=str
                    )
                finally:
                    if key is not None:
                        MCP_KEY.reset(key)

            try:
                return await call(scope.run, name, args, body)
            except InDoubt as exc:
                return (
                    f"The outcome of this {tool.name} call is unknown: it was interrupted and may or may not "
                    f"have taken effect, and it will not be run again (operation {exc.operation_id}). "
                    "Do not assume either outcome."
                )

        approval = self.tools.get(tool.name, ToolEffect()).approval
        needs = tool.needs_approval if approval is None else _needs(approval)
        return dataclasses.replace(tool, on_invoke_tool=on_invoke, needs_approval=needs)


class DurableStreaming:
    """What ``DurableAgent.run_streamed`` returns: the SDK's ``RunResultStreaming`` of the run's
    latest leg (its attributes read through, ``final_output`` among them). ``stream_events()``
    yields each leg's events; where a leg ends on interruptions for approvals, it waits for the
    outlast approvals (``run.approval``: the run is suspended, its worker let go, and a resume
    replays the legs before from the journal), then streams the leg the decisions start."""

    def __init__(
        self,
        agent: DurableAgent,
        scope: Scope,
        first: RunResultStreaming,
        config: RunConfig,
        kwargs: dict[str, Any],
    ) -> None:
        self._agent = agent
        self._scope = scope
        self._config = config
        self._kwargs = {k: v for k, v in kwargs.items() if k != "context"}  # the state carries it
        self.result = first

    def __getattr__(self, name: str) -> Any:
        return getattr(self.result, name)

    async def stream_events(self) -> AsyncIterator[Any]:
        while True:
            async for event in self.result.stream_events():
                yield event
            if not self.result.interruptions:
                return
            state = self.result.to_state()
            for item in self.result.interruptions:  # in the order the model made the calls
                await self._agent._decide(self._scope, state, item)
            self.result = self._agent._streamed(self._scope, state, self._config, self._kwargs)


# the idempotency key of the MCP tool call dispatched now (its operation's)
MCP_KEY: contextvars.ContextVar[str] = contextvars.ContextVar("outlast_openai_agents_mcp_key")


def _send_keys(server: Any) -> None:
    """Make each call of ``server``'s tools dispatched as an operation carry the operation's
    idempotency key in its ``_meta``, through the SDK's ``tool_meta_resolver`` (the app's own
    resolver, if any, still runs; the key is added to what it returns)."""
    inner = server.tool_meta_resolver
    if getattr(inner, "outlast_keyed", False):
        return

    async def resolve(context: Any) -> dict[str, Any] | None:
        meta = inner(context) if inner is not None else None
        if inspect.isawaitable(meta):
            meta = await meta
        key = MCP_KEY.get(None)
        return meta if key is None else {**(meta or {}), IDEMPOTENCY_KEY_META: key}

    resolve.outlast_keyed = True  # type: ignore[attr-defined]
    server.tool_meta_resolver = resolve


def _hints(annotations: Any) -> dict[str, Any]:
    """An MCP tool's annotations (as the SDK keeps them: the ``mcp`` package's model) as the
    protocol spells them (``readOnlyHint``, ``idempotentHint``)."""
    fields = annotations.model_dump() if isinstance(annotations, pydantic.BaseModel) else {}
    return {
        hint: fields.get(hint) or fields.get(snake)
        for hint, snake in (("readOnlyHint", "read_only_hint"), ("idempotentHint", "idempotent_hint"))
    }


def _session_of(run: Run, kwargs: Mapping[str, Any]) -> None:
    """Refuse a ``session=`` kept outside the run: a resume replays the turns before, and would
    add their items to it again (``RunSession`` is rebuilt by that replay)."""
    session = kwargs.get("session")
    if session is not None and not (isinstance(session, RunSession) and session.run is run):
        raise ValueError(
            f"session {type(session).__name__}: a resumed run would add its replayed turns to it "
            "again; give a RunSession(run) made in the workflow"
        )


def _needs(approval: Approval) -> Any:
    """The SDK's ``needs_approval`` of a tool whose calls ``approval`` decides: every call, or
    those ``approval.when`` picks from the model's arguments."""
    if approval.when is None:
        return True

    async def needs(ctx: Any, args: dict[str, Any], call_id: str) -> bool:
        return approval.applies(args)

    return needs


def _journaled(config: RunConfig | None) -> RunConfig:
    """``config`` (or the default), its model and its model provider journaled."""
    config = config or RunConfig()
    model = config.model
    return dataclasses.replace(
        config,
        model=JournaledModel(model, type(model).__name__) if isinstance(model, Model) else model,
        model_provider=JournaledProvider(config.model_provider or MultiProvider()),
    )


def _register(
    app: App, name: str, effect: ToolEffect, cost: dict[str, float], kind: Literal["tool", "model"]
) -> None:
    app.tools[name] = Tool(
        name,
        dispatched,
        "read" if effect.effect == "read" else "write",
        effect.effect == "idempotent",
        effect.retry,
        pydantic.create_model(f"{name}_args", __config__=_FREE),
        cost,
        effect.timeout,
        kind=kind,
    )
    if effect.reconciler is not None:
        app.reconcilers[name] = (
            effect.reconciler if kind == "model" else _recorded_as_returned(effect.reconciler)
        )


def _recorded_as_returned(reconcile: Reconciler) -> Reconciler:
    """The app's reconciler, its answer journaled as the tool's own result would be (as JSON)."""

    async def reconciled(args: dict[str, Any], action: Action) -> Any:
        answer = reconcile(args, action)
        if hasattr(answer, "__await__"):
            answer = await answer
        return answer if answer is NOT_EXECUTED else pydantic_core.to_jsonable_python(answer, fallback=str)

    return reconciled
