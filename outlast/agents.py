"""This module makes a pydantic-ai agent run durably as an outlast workflow (the ``agents`` extra).

``OutlastDurability(app, tools={...})`` is a pydantic-ai durability capability: attached to an
``Agent``, and run with ``run_agent(run, agent, prompt)`` inside a workflow, it makes each model
request and each tool call of the agent one outlast operation (``run.call``), journaled once and
served from the journal on every resume:

- a **model request** is a call of the tool ``AGENT:model`` (``kind="model"``): what the model
  received is captured (``outlast status RUN --op``), its response journaled, its token usage
  charged to the run's budget (``model_cost`` reserved before it is sent). It has no effect in the
  world, only a cost: one in flight when its worker died is sent again (its reconciler says "not
  executed"), one journaled is never sent again.
- a **tool call** is a call of the tool ``AGENT.TOOL``, with the effect declared for it here:
  ``read()``, ``idempotent()`` (``current_action().idempotency_key`` is the same on every resume),
  ``reconciled(fn)`` or ``plain()`` (the default: in doubt after a crash, never run twice). An
  in-doubt call is answered to the model as a failed call whose outcome is unknown
  (``ToolFailed``), and ``run.in_doubt("AGENT.TOOL")`` is true.
- a tool served by an **MCP server** (a pydantic-ai ``MCPToolset``) is called the same way, its
  default effect declared by the server's tool annotations (``mcp_effect``: ``readOnlyHint`` read,
  ``idempotentHint`` idempotent, neither plain), overridden by ``tools=``; every call carries the
  operation's idempotency key in its ``_meta`` (``IDEMPOTENCY_KEY_META``).
- a tool declared with ``approval=Approval(...)`` waits for an outlast approval bound to the exact
  arguments the model proposed (a revision needs an approval of its own); a rejection or an
  expiry is answered to the model as a failed call.

It is built on pydantic-ai's public engine API (``BaseDurabilityCapability`` and a
``DurableOperationBackend``), as its Temporal, DBOS and Prefect capabilities are: the framework
keeps its tool schemas, validation, retries and event stream, and hands each durable unit here.

Conversations: ``run_agent(..., admit="CHANNEL")`` admits the messages that arrived on the run's
channel while the agent worked, once, at its next model request (``AgentScope.admit``: each taken
with ``run.receive(CHANNEL, timeout=0)``, journaled, replayed the same on a resume), into the
agent's own history; ``run_agent(..., stream=True)`` streams each model request, whose text goes to
the run's live readers as it comes (``AgentScope.publish``: ``current_action().stream``), while
the durable answer is the journaled response.
"""

from __future__ import annotations

import contextvars
import json
import sys
import weakref
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, cast

import pydantic
import pydantic_core
from pydantic_ai import Agent
from pydantic_ai.agent import EventStreamHandler
from pydantic_ai.agent.abstract import AbstractAgent
from pydantic_ai.durable_exec import (
    JSON_CODEC,
    BaseDurabilityCapability,
    BoundDurableOperation,
    DurabilityEngineSpec,
    DurableOperation,
    DurableOperationBackend,
    EventStreamHandlerId,
    ModelCompactMessagesId,
    ModelRequestId,
    ModelRequestParams,
    ParameterTransports,
    ToolsetCallToolId,
    ToolsetCallToolParams,
    ToolsetValidateToolArgumentsId,
    conversation_id_from_run_id,
    durable_unit_scope,
    revalidate_function_call,
)
from pydantic_ai.exceptions import ToolFailed, UserError
from pydantic_ai.messages import (
    AgentStreamEvent,
    ModelMessage,
    ModelMessagesTypeAdapter,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
    ToolCallPart,
)
from pydantic_ai.models import ModelRequestContext
from pydantic_ai.run import AgentRunResult
from pydantic_ai.tools import RunContext
from pydantic_ai.toolsets import AbstractToolset, FunctionToolset

from outlast._agent_tools import (
    Approval,
    Declared,
    ToolEffect,
    approved,
    declared,
    idempotent,
    mcp_effect,
    plain,
    read,
    reconciled,
)
from outlast._captured import Message
from outlast._mcp import IDEMPOTENCY_KEY_META
from outlast.action import NOT_EXECUTED, Action, current_action
from outlast.app import App, Reconciler, Tool
from outlast.errors import InDoubt

if TYPE_CHECKING:
    from outlast.worker.run import Run

__all__ = [
    "IDEMPOTENCY_KEY_META",
    "AgentScope",
    "Approval",
    "OutlastDurability",
    "ToolEffect",
    "agent_workflow",
    "idempotent",
    "mcp_effect",
    "plain",
    "read",
    "reconciled",
    "run_agent",
]

# -- the workflow's side -------------------------------------------------------------------


class AgentScope:
    """One agent run inside one outlast run: what the capability's operations go through."""

    def __init__(self, run: Run, channel: str | None = None) -> None:
        self.run = run
        self.channel = channel  # where input admitted at the next model request arrives
        # tool call id -> the arguments approved for it, or why it is not made
        self.decided: dict[str, dict[str, Any] | str] = {}
        # each message captured, dumped once (pydantic-ai changes no message once it was sent):
        # a model request's capture costs its new messages, not the history's length
        self.dumped: dict[int, tuple[ModelMessage, Message]] = {}

    def dump(self, message: ModelMessage) -> Message:
        """``message`` as JSON, dumped at its first capture and kept (its id is then not reused)."""
        hit = self.dumped.get(id(message))
        if hit is None or hit[0] is not message:
            dumped = Message(ModelMessagesTypeAdapter.dump_python([message], mode="json")[0])
            hit = self.dumped[id(message)] = (message, dumped)
        return hit[1]

    async def call(
        self, tool: str, args: dict[str, Any], body: Callable[[dict[str, Any]], Awaitable[Any]]
    ) -> Any:
        """``run.call(tool, **args)``, whose dispatch runs ``body`` with the arguments journaled."""
        token = _BODY.set(body)
        try:
            return await self.run.call(tool, **args)
        finally:
            _BODY.reset(token)

    async def admit(self) -> list[str]:
        """Before each model request: the messages that arrived on the scope's channel while the
        agent worked, oldest first, each taken once and journaled (``run.receive`` with
        ``timeout=0``: a message waiting is taken, else None at once, no wait), as the user's
        prompts. A resumed run is served them from its journal."""
        admitted: list[str] = []
        if self.channel is None:
            return admitted
        while (message := await self.run.receive(self.channel, timeout=0)) is not None:
            admitted.append(_prompt(message))
        return admitted

    def publish(self, event: Any) -> None:
        """One live event of the model's stream, inside its request's operation, not journaled:
        its text goes to the run's live readers where the action can stream
        (``current_action().stream``, once runs stream live output), else nowhere."""
        text = ""
        if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart):
            text = event.part.content  # a text part's first piece comes with its start
        elif isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
            text = event.delta.content_delta
        stream = getattr(current_action(), "stream", None)
        if stream is not None and text:
            stream(text)


def _prompt(message: Any) -> str:
    """A message admitted as the user's prompt: a text as it is, ``{"text": ...}`` its text,
    any other JSON as JSON."""
    if isinstance(message, str):
        return message
    if isinstance(message, dict) and isinstance(message.get("text"), str):
        return str(message["text"])
    return json.dumps(pydantic_core.to_jsonable_python(message, fallback=repr))


async def _ignored(ctx: RunContext[Any], events: AsyncIterable[AgentStreamEvent]) -> None:
    """The event stream handler of a run streamed for its live readers only."""
    async for _ in events:
        pass


# agent runs started in each workflow execution (its Run): their stable ids, one per run_agent
_AGENT_RUNS: weakref.WeakKeyDictionary[Run, int] = weakref.WeakKeyDictionary()
_SCOPE: contextvars.ContextVar[AgentScope] = contextvars.ContextVar("outlast_agent_scope")
_BODY: contextvars.ContextVar[Callable[[dict[str, Any]], Awaitable[Any]]] = contextvars.ContextVar(
    "outlast_agent_body"
)
# the idempotency key of the MCP tool call dispatched now (its operation's)
_MCP_KEY: contextvars.ContextVar[str] = contextvars.ContextVar("outlast_mcp_key")


async def _dispatched(**args: Any) -> Any:
    """The function of every agent tool registered in the app: the unit handed to ``run.call``."""
    try:
        body = _BODY.get()
    except LookupError:
        raise RuntimeError("an agent's tool runs only inside its agent (outlast.agents.run_agent)") from None
    return await body(args)


async def run_agent(
    run: Run,
    agent: AbstractAgent[Any, Any],
    user_prompt: Any = None,
    *,
    admit: str | None = None,
    stream: bool = False,
    **kwargs: Any,
) -> Any:
    """Run ``agent`` (with an ``OutlastDurability``) as part of the workflow's ``run``: every model
    request and tool call is an operation of ``run``. Takes ``agent.run``'s arguments; returns its
    ``AgentRunResult``. ``admit``: a channel whose messages, arrived while the agent works, are
    admitted once at its next model request (journaled). ``stream``: model requests are streamed
    (the model must stream), their text sent live to ``client.stream(run_id)`` as it comes, even
    with no ``event_stream_handler``."""
    if OutlastDurability.from_agent(agent) is None:
        raise UserError(f"run '{run.id}': the agent has no OutlastDurability capability: add it to the Agent")
    if stream and kwargs.get("event_stream_handler") is None:
        kwargs["event_stream_handler"] = _ignored
    scope = _SCOPE.get(None)
    token = _SCOPE.set(scope if scope is not None and scope.run is run else AgentScope(run, admit))
    try:
        return await agent.run(user_prompt, **kwargs)
    finally:
        _SCOPE.reset(token)


def agent_workflow(app: App, name: str, agent: Agent[Any, Any], *, version: str = "1") -> None:
    """Register the workflow ``name``: a run of it is one run of ``agent`` on the input's
    ``prompt``, and its result is the agent's output (as JSON)."""

    async def workflow(run: Run, prompt: str) -> Any:
        result: AgentRunResult[Any] = await run_agent(run, agent, prompt)
        return pydantic_core.to_jsonable_python(result.output)

    workflow.__qualname__ = workflow.__name__ = f"agent_{name}"
    app.workflow(name, version=version)(workflow)


# -- the capability ------------------------------------------------------------------------


def _not_executed(args: dict[str, Any], action: Action) -> Any:
    """A model request has no effect in the world: one interrupted is simply sent again."""
    return NOT_EXECUTED


_FREE = pydantic.ConfigDict(extra="allow")


class OutlastDurability(BaseDurabilityCapability[Any]):
    """Makes an agent's model requests and tool calls outlast operations (see the module doc).

    ``tools`` declares each tool's effect by its name (``read()``, ``idempotent()``,
    ``reconciled(fn)``, ``plain()``, or the names as strings); an undeclared tool is ``plain``, an
    undeclared MCP tool what its server's annotations say (``mcp_effect``).
    ``model_cost`` is reserved from the run's budget before each model request and replaced by the
    response's usage, charged as ``usage_budget`` (input plus output tokens)."""

    engine_spec = DurabilityEngineSpec(
        engine_name="outlast",
        durable_unit_noun="operation",
        durable_container_noun="run",
        codec=JSON_CODEC,
        wrapped_toolset_kinds=frozenset({"function", "mcp"}),
        toolset_lifecycles={"function": "enter-always", "mcp": "enter-always"},
        unsupported_runtime_toolset_kinds=frozenset({"function", "mcp", "dynamic"}),
        journal_discovery=False,
    )

    def __init__(
        self,
        app: App,
        *,
        tools: Mapping[str, Declared] | None = None,
        model_cost: Mapping[str, float] | None = None,
        usage_budget: str = "tokens",
        name: str | None = None,
    ) -> None:
        super().__init__(name=name)
        self.app = app
        self.tools = {tool: declared(value) for tool, value in (tools or {}).items()}
        self.model_cost = dict(model_cost or {})
        self.usage_budget = usage_budget
        self._backend: _Backend | None = None
        self._mcp_registered: dict[str, ToolEffect] = {}

    @property
    def model_tool(self) -> str:
        """The outlast tool each model request of this agent is a call of."""
        return f"{self.name}:model"

    def tool_name(self, tool: str) -> str:
        """The outlast tool a call of the agent's ``tool`` is (``run.in_doubt`` takes it)."""
        return f"{self.name}.{tool}"

    @property
    def in_durable_context(self) -> bool:
        return _SCOPE.get(None) is not None

    def get_default_run_id(self) -> str | None:
        scope = _SCOPE.get(None)
        if scope is None:
            return None
        count = _AGENT_RUNS.get(scope.run, 0) + 1  # the same on every resume: the workflow is deterministic
        _AGENT_RUNS[scope.run] = count
        return f"{scope.run.id}:agent-{count}"

    def get_default_conversation_id(self, run_id: str) -> str | None:
        return conversation_id_from_run_id(run_id) if self.in_durable_context else None

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        """Admit the input that arrived while the agent worked (``AgentScope.admit``): enqueued
        for this request, so that pydantic-ai puts it in the request and in the agent's history."""
        scope = _SCOPE.get(None)
        if scope is not None:
            for prompt in await scope.admit():
                ctx.enqueue(prompt)
        return await super().before_model_request(ctx, request_context)

    def _model_stream_event_handler(self) -> EventStreamHandler[Any] | None:
        """The handler of a streamed model request's live events, inside its operation: each event
        is also published (``AgentScope.publish``) as it comes."""
        inner = super()._model_stream_event_handler()
        scope = _SCOPE.get(None)
        if scope is None:
            return inner

        async def handler(ctx: RunContext[Any], events: AsyncIterable[AgentStreamEvent]) -> None:
            async def published() -> AsyncIterator[AgentStreamEvent]:
                async for event in events:
                    scope.publish(event)
                    yield event

            if inner is None:
                async for _ in published():
                    pass
            else:
                await inner(ctx, published())

        return handler

    def get_durable_operation_backend(self) -> DurableOperationBackend[Any]:
        if self._backend is None:
            self._backend = _Backend(self)
        return self._backend

    def _bind_to_agent(self, agent: AbstractAgent[Any, Any]) -> None:
        """Register, in the app, the outlast tools this agent's operations are calls of."""
        self._backend = None
        for toolset in agent.toolsets:
            toolset.apply(self._refuse_unjournaled)
        super()._bind_to_agent(agent)
        self._register(
            self.model_tool, ToolEffect("reconciled", _not_executed, cost=self.model_cost), "model"
        )
        names = [name for ts in agent.toolsets for name in _function_tools(ts)]
        unknown = sorted(set(self.tools) - set(names))
        if unknown and not any(_mcp_toolsets(ts) for ts in agent.toolsets):  # MCP tools: known when listed
            raise UserError(f"agent {self.name!r}: tools= names no tool of it: {', '.join(unknown)}")
        for tool in names:
            self._register(self.tool_name(tool), self.tools.get(tool, ToolEffect()), "tool")

    def _refuse_unjournaled(self, leaf: AbstractToolset[Any]) -> None:
        if _is_mcp(leaf):
            _send_keys(leaf)
        elif not isinstance(leaf, FunctionToolset):
            raise UserError(
                f"agent {self.name!r}: outlast journals function and MCP tools only, not "
                f"{type(leaf).__name__}: call the service from a function tool with its declared effect"
            )

    def mcp_tool(self, tool: str, annotations: Mapping[str, Any] | None) -> str:
        """The outlast tool a call of the MCP tool ``tool`` is, registered (when first called) with
        the effect declared in ``tools=``, else by the server's ``annotations``."""
        name = self.tool_name(tool)
        effect = self.tools.get(tool) or mcp_effect(annotations)
        if self._mcp_registered.get(name) != effect:
            self._register(name, effect, "tool")
            self._mcp_registered[name] = effect
        return name

    def _register(self, name: str, effect: ToolEffect, kind: Literal["tool", "model"]) -> None:
        args_model = pydantic.create_model(f"{name}_args", __config__=_FREE)
        self.app.tools[name] = Tool(
            name,
            _dispatched,
            "read" if effect.effect == "read" else "write",
            effect.effect == "idempotent",
            effect.retry,
            args_model,
            dict(effect.cost),
            effect.timeout,
            kind=kind,
        )
        if effect.reconciler is not None:
            self.app.reconcilers[name] = (
                effect.reconciler if kind == "model" else _recorded_as_returned(effect.reconciler)
            )


def _recorded_as_returned(reconcile: Reconciler) -> Reconciler:
    """The user's reconciler, its answer journaled as the tool's own return would be: in the
    shape pydantic-ai records a returned value in (``CallToolResult``, which it keeps loadable)."""

    async def reconciled(args: dict[str, Any], action: Action) -> Any:
        answer = reconcile(args, action)
        if isinstance(answer, Awaitable):
            answer = await answer
        if answer is NOT_EXECUTED:
            return answer
        return {"kind": "tool_return", "result": pydantic_core.to_jsonable_python(answer)}

    return reconciled


def _is_mcp(toolset: AbstractToolset[Any]) -> bool:
    """Whether ``toolset`` is pydantic-ai's ``MCPToolset``.

    An instance of it means its module is imported already, so an agent with no MCP server does not
    import ``mcp`` here (0.63 s of a worker's first run).
    """
    module = sys.modules.get("pydantic_ai.mcp")
    return module is not None and isinstance(toolset, module.MCPToolset)


def _mcp_toolsets(toolset: AbstractToolset[Any]) -> list[AbstractToolset[Any]]:
    found: list[AbstractToolset[Any]] = []
    toolset.apply(lambda leaf: found.append(leaf) if _is_mcp(leaf) else None)
    return found


def _send_keys(toolset: Any) -> None:
    """Make each call of an MCP toolset dispatched as an operation carry the operation's
    idempotency key in its ``_meta``, through pydantic-ai's ``process_tool_call`` hook (the app's
    own hook, if any, still runs, and sees the key)."""
    inner = toolset.process_tool_call
    if getattr(inner, "outlast_keyed", False):
        return

    async def process(ctx: RunContext[Any], call: Any, name: str, args: dict[str, Any]) -> Any:
        key = _MCP_KEY.get(None)
        if key is None:
            return await (inner(ctx, call, name, args) if inner is not None else call(name, args))

        async def keyed(name: str, args: dict[str, Any], *, metadata: dict[str, Any] | None = None) -> Any:
            return await call(name, args, metadata={**(metadata or {}), IDEMPOTENCY_KEY_META: key})

        return await (inner(ctx, keyed, name, args) if inner is not None else keyed(name, args))

    process.outlast_keyed = True  # type: ignore[attr-defined]
    toolset.process_tool_call = process


def _function_tools(toolset: AbstractToolset[Any]) -> list[str]:
    found: list[str] = []
    toolset.apply(lambda leaf: found.extend(leaf.tools) if isinstance(leaf, FunctionToolset) else None)
    return found


# -- the backend: each durable unit as an outlast operation ----------------------------------


class _Transports(ParameterTransports):
    """A tool's arguments are journaled as JSON: validated again before the tool gets them."""

    async def prepare_function_call(
        self, toolset: FunctionToolset[Any], params: ToolsetCallToolParams
    ) -> ToolsetCallToolParams:
        return await revalidate_function_call(toolset, params, engine_spec=OutlastDurability.engine_spec)


@dataclass(frozen=True)
class _Unit:
    """The config of an operation the backend journals (pydantic-ai asks for one per tool)."""

    tool: str


class _Backend(DurableOperationBackend[_Unit]):
    parameter_transports = _Transports()

    def __init__(self, capability: OutlastDurability) -> None:
        self.capability = capability

    def bind(self, operation: DurableOperation[Any, Any, Any]) -> BoundDurableOperation[Any, Any, Any]:
        return _Bound(operation, self.capability)

    def config_for_tool(
        self, operation: DurableOperation[Any, Any, Any], *, tool: object | None, tool_name: str
    ) -> _Unit | Literal[False]:
        # Validating the model's arguments has no effect: done in the workflow, on every replay.
        if isinstance(operation.operation_id, ToolsetValidateToolArgumentsId):
            return False
        return _Unit(tool_name)

    def registrations(self) -> Sequence[Callable[..., object]]:
        return ()


class _Bound(BoundDurableOperation[Any, Any, Any]):
    def __init__(self, operation: DurableOperation[Any, Any, Any], capability: OutlastDurability) -> None:
        self._operation = operation
        self._capability = capability

    @property
    def operation(self) -> DurableOperation[Any, Any, Any]:
        return self._operation

    async def __call__(self, params: Any, *, config: object | None = None) -> Any:
        op = self._operation
        scope = _SCOPE.get(None)
        if scope is None:  # outside a run the capability is transparent
            return await op.handler(params)
        match op.operation_id:
            case ModelRequestId() | ModelCompactMessagesId():
                return await self._model(scope, params)
            case ToolsetCallToolId():
                return await self._tool(scope, cast(ToolsetCallToolParams, params))
            case EventStreamHandlerId():
                return await op.handler(params)  # live output: not journaled
            case other:
                raise UserError(f"run '{scope.run.id}': outlast does not journal {other!r} yet")

    async def _model(self, scope: AgentScope, params: Any) -> Any:
        op, cap = self._operation, self._capability

        async def body(args: dict[str, Any]) -> Any:
            action = current_action()
            action.capture(_request(params, scope))
            with durable_unit_scope():
                result = await op.handler(params)
            usage = getattr(result, "usage", None)
            tokens = (usage.input_tokens + usage.output_tokens) if usage is not None else 0
            if tokens:
                action.charge(**{cap.usage_budget: tokens})
            return op.result_codec.dump(result)

        model = getattr(op.operation_id, "model_id", None) or getattr(
            op.operation_id, "model_name", "default"
        )
        result = op.result_codec.load(await scope.call(cap.model_tool, {"model": model}, body))
        await self._approvals(scope, result)
        return result

    async def _approvals(self, scope: AgentScope, result: Any) -> None:
        """The approvals the response's tool calls need, asked one after the other in the order
        the model made the calls, before any of them runs: the calls then run in parallel, each
        one crossing, so that every crossing keeps its position on every resume (an approval
        asked from inside parallel calls would take one that depends on when others answered)."""
        cap = self._capability
        for part in getattr(result, "parts", ()):
            if not isinstance(part, ToolCallPart):
                continue
            approval = cap.tools.get(part.tool_name, ToolEffect()).approval
            args = part.args_as_dict()
            if approval is not None and approval.applies(args):
                name = cap.tool_name(part.tool_name)
                scope.decided[part.tool_call_id] = await approved(scope.run, name, args, approval)

    async def _tool(self, scope: AgentScope, params: ToolsetCallToolParams) -> Any:
        op, cap = self._operation, self._capability
        name = cap.tool_name(params.name)
        mcp = isinstance(op.operation_id, ToolsetCallToolId) and op.operation_id.toolset_kind == "mcp"
        if mcp:
            tool_def = params.tool.tool_def if params.tool is not None else None
            name = cap.mcp_tool(params.name, ((tool_def and tool_def.metadata) or {}).get("annotations"))
        args: dict[str, Any] = pydantic_core.to_jsonable_python(params.tool_args)
        decided = scope.decided.pop(params.ctx.tool_call_id or "", None)
        if isinstance(decided, str):
            raise ToolFailed(decided)  # rejected, or expired: the call is not made
        if decided is not None:
            args = decided  # approved: the arguments people approved (a revision of the model's)

        async def body(journaled: dict[str, Any]) -> Any:
            call = ToolsetCallToolParams(params.name, tool_args=journaled, ctx=params.ctx, tool=params.tool)
            key = _MCP_KEY.set(current_action().idempotency_key) if mcp else None
            try:
                with durable_unit_scope():
                    return op.result_codec.dump(await op.handler(call))
            finally:
                if key is not None:
                    _MCP_KEY.reset(key)

        try:
            payload = await scope.call(name, args, body)
        except InDoubt as exc:
            raise ToolFailed(
                f"The outcome of this {params.name} call is unknown: it was interrupted and may or may "
                f"not have taken effect, and it will not be run again (operation {exc.operation_id}). "
                "Do not assume either outcome."
            ) from None
        return op.result_codec.load(payload)


def _request(params: Any, scope: AgentScope) -> Any:
    """What the model receives, as JSON: the messages, settings and tool definitions. Stored by
    delta (``outlast._captured``): each message is dumped once per agent run."""
    if not isinstance(params, ModelRequestParams):
        return pydantic_core.to_jsonable_python(params, fallback=repr)
    parameters = params.model_request_parameters
    return {
        "messages": [scope.dump(m) for m in params.messages],
        "settings": pydantic_core.to_jsonable_python(params.model_settings, fallback=repr),
        "tools": [t.name for t in (*parameters.function_tools, *parameters.output_tools)],
    }
