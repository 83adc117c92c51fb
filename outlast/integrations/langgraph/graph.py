"""``DurableGraph`` executes a compiled LangGraph graph durably inside an outlast workflow.

``DurableGraph(app, "triage", compiled, nodes={"charge": "idempotent"})`` registers one tool per
node of the graph, ``GRAPH.NODE``, and keeps a copy of the graph whose every node runs as an
operation of the workflow's run (``run.call``): ``await triage.run(run, input)`` inside a workflow
runs the graph; each node's execution is an operation whose result, the node's state update, is
journaled before the graph takes its next step. On a resume the workflow runs again from the
start, LangGraph runs the graph again, and each node that finished is served its update from the
journal (its code is not run again); the first node that did not finish runs live.

What a node may do twice is declared per node, as for any tool: ``"read"`` (no effect: redone
after a crash), ``"idempotent"`` (sent again with the same ``current_action().idempotency_key``),
``NodeEffect("reconciled", reconciler=fn)`` (the reconciler says whether it happened), or
``"plain"``, the default: a node cut by a crash mid-way is in doubt, never run twice, and the run
waits with the reason ``in_doubt``. A node's code reads ``current_action()`` like a tool's.

A node that calls ``interrupt(value)`` makes the run wait on a request (``run.request``) named
after the node, its payload the value, with no worker held; the answer (``client.respond``) is
what ``interrupt()`` returns when the node runs again from its start, as LangGraph resumes it: each
execution of the node is an operation of its own (``answers=N`` after its N-th answer). The
answer's type is the node's in ``interrupts=`` (a pydantic model, a ``TypedDict``, any type
pydantic validates), its JSON schema stored with the request and checked by ``client.respond``;
else any JSON value.

A ``ToolNode`` of the graph is no operation: it runs in the workflow, on every replay, and each of
its tool calls is one (``run.call`` of ``GRAPH.TOOL``, through ToolNode's ``awrap_tool_call``), its
result the ``ToolMessage`` or ``Command``, with the effect declared in ``tools=``, else what an MCP
server's annotations of the tool say (``outlast._mcp``), else plain. A call in doubt is answered to
the model as a failed call whose outcome is unknown; a reconciler's answer, what the tool would
have returned, is made the call's ``ToolMessage``.

``run(..., stream_mode=[...])`` sends LangGraph's chunks of those modes to the run's live readers
(``run.stream``, which sends nothing while the run replays); an ``updates`` chunk is sent only for a
node whose update was made now, not served from the journal (``_LIVE``: the case of a node served
from the journal while another of its step runs live); a ``ToolNode``'s when one of its calls was
made now.

The graph is deterministic given its nodes' updates (LangGraph's routing runs on the state), so a
replay takes the same path. A node's update is journaled as JSON when it is JSON, else with
LangGraph's own serializer (messages, ``Command``), base64 in the journal.
"""

from __future__ import annotations

import base64
import collections
import contextvars
import dataclasses
import itertools
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, cast

import pydantic
import pydantic_core
from langchain_core.messages import ToolMessage
from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda
from langchain_core.runnables.config import var_child_runnable_config
from langgraph._internal._constants import CONFIG_KEY_SCRATCHPAD
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.constants import START
from langgraph.errors import GraphInterrupt
from langgraph.prebuilt import ToolNode
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.pregel import Pregel
from langgraph.types import Command

from outlast._mcp import mcp_effect_name
from outlast.action import NOT_EXECUTED, Action
from outlast.app import App, Reconciler, Retry, Tool
from outlast.errors import InDoubt

if TYPE_CHECKING:
    from outlast.worker.run import Run

__all__ = ["DurableGraph", "NodeEffect"]

EffectName = Literal["read", "idempotent", "reconciled", "plain"]
StreamMode = Literal["updates", "custom", "messages", "values"]

_FREE = pydantic.ConfigDict(extra="allow")
_SERDE = JsonPlusSerializer()
_RUN: contextvars.ContextVar[Run] = contextvars.ContextVar("outlast_graph_run")
_BODY: contextvars.ContextVar[Callable[[], Awaitable[Any]]] = contextvars.ContextVar("outlast_graph_body")
# the nodes whose update was made live in this graph run (not served from the journal), each once
# per execution, taken back as its ``updates`` chunk is streamed
_LIVE: contextvars.ContextVar[collections.Counter[str]] = contextvars.ContextVar("outlast_graph_live")
# the ToolNode executions (their tasks) one of whose calls ran live, counted once each in ``_LIVE``
_LIVE_TASKS: contextvars.ContextVar[set[Any]] = contextvars.ContextVar("outlast_graph_live_tasks")


@dataclass(frozen=True)
class NodeEffect:
    """What a repeat of one node would do (``read``, ``idempotent``, ``reconciled``, ``plain``),
    and the rest of its declaration as a tool."""

    effect: EffectName = "plain"
    reconciler: Reconciler | None = None
    timeout: float | None = None
    retry: Retry | None = None

    def __post_init__(self) -> None:
        if (self.effect == "reconciled") != (self.reconciler is not None):
            raise TypeError("a reconciled node needs its reconciler, and only a reconciled node has one")


class DurableGraph:
    """A compiled graph whose nodes are operations of the run that runs it (``run``)."""

    def __init__(
        self,
        app: App,
        name: str,
        graph: Pregel[Any, Any, Any, Any],
        *,
        nodes: Mapping[str, NodeEffect | EffectName] | None = None,
        tools: Mapping[str, NodeEffect | EffectName] | None = None,
        interrupts: Mapping[str, Any] | None = None,
    ) -> None:
        declared = _effects(nodes)
        _refuse_unknown(name, "node", declared, set(graph.nodes))
        answers = dict(interrupts or {})
        _refuse_unknown(name, "node", answers, set(graph.nodes))
        self.name = name
        wrapped: dict[str, Any] = {}
        tool_nodes = {n: s.bound for n, s in graph.nodes.items() if isinstance(s.bound, ToolNode)}
        for node, spec in graph.nodes.items():
            if node == START:  # the graph's input, written to its channels: no code of the app
                continue
            if node in tool_nodes:  # runs in the workflow: each of its tool calls an operation
                wrapped[node] = spec.copy({"bound": _tool_calls_journaled(name, tool_nodes[node])})
                continue
            tool = f"{name}.{node}"
            _register(app, tool, declared.get(node, NodeEffect()))
            wrapped[node] = spec.copy({"bound": _journaled(tool, spec.bound, answers.get(node, Any))})
        by_name = {t.name: t for n in tool_nodes.values() for t in n.tools_by_name.values()}
        per_tool = _effects(tools)
        _refuse_unknown(name, "tool", per_tool, set(by_name))
        for tool_name, lc_tool in by_name.items():
            effect = per_tool.get(tool_name) or _annotated(lc_tool.metadata)
            _register(app, self.tool_name(tool_name), effect)
        self.graph = graph.copy({"nodes": {**graph.nodes, **wrapped}})

    def tool_name(self, node: str) -> str:
        """The tool a node's operations are calls of (``GRAPH.NODE``), or a tool's of a ``ToolNode``
        (``GRAPH.TOOL``)."""
        return f"{self.name}.{node}"

    async def run(
        self,
        run: Run,
        input: Any,
        config: RunnableConfig | None = None,
        *,
        stream_mode: Sequence[StreamMode] = (),
    ) -> Any:
        """Run the graph on ``input`` as part of the workflow's ``run`` (``ainvoke``'s result).
        ``stream_mode``: LangGraph's stream modes whose chunks go to the run's live readers
        (``client.stream(run_id)``) as ``{"mode": MODE, "data": CHUNK}``, as JSON; the work of
        nodes served from the journal on a resume is not streamed again."""
        token, live = _RUN.set(run), _LIVE.set(collections.Counter())
        tasks = _LIVE_TASKS.set(set())
        try:
            if not stream_mode:
                return await self.graph.ainvoke(input, config)
            return await self._streamed(run, input, config, set(stream_mode))
        finally:
            _LIVE_TASKS.reset(tasks)
            _LIVE.reset(live)
            _RUN.reset(token)

    async def _streamed(self, run: Run, input: Any, config: RunnableConfig | None, modes: set[str]) -> Any:
        """``astream`` with ``modes`` and ``values``: each chunk of ``modes`` sent live, the last
        ``values`` chunk the result (as ``ainvoke`` keeps it)."""
        result = None
        asked = cast(Any, [*modes, "values"])
        async for mode, chunk in self.graph.astream(input, config, stream_mode=asked):
            if mode == "values":
                result = chunk
            if mode not in modes:
                continue
            data = _made_live(cast(dict[str, Any], chunk)) if mode == "updates" else chunk
            if data:
                run.stream({"mode": mode, "data": pydantic_core.to_jsonable_python(data, fallback=repr)})
        return result


def _effects(declared: Mapping[str, NodeEffect | EffectName] | None) -> dict[str, NodeEffect]:
    return {k: NodeEffect(v) if isinstance(v, str) else v for k, v in (declared or {}).items()}


def _refuse_unknown(graph: str, what: str, declared: Mapping[str, Any], known: set[str]) -> None:
    unknown = set(declared) - known
    if unknown:
        raise ValueError(f"graph {graph!r} has no {what} {sorted(unknown)}; its {what}s: {sorted(known)}")


def _annotated(metadata: Mapping[str, Any] | None) -> NodeEffect:
    """A tool's default effect: what an MCP server's annotations of it declare (kept in the tool's
    ``metadata`` by langchain-mcp-adapters), else plain."""
    return NodeEffect(mcp_effect_name(metadata))


def _tool_calls_journaled(graph: str, node: ToolNode) -> ToolNode:
    """A copy of ``node`` (it runs in the workflow, on every replay) whose every tool call is an
    operation of the tool ``GRAPH.TOOL`` (through ToolNode's ``awrap_tool_call``): its result, a
    ``ToolMessage`` or ``Command``, journaled. A call in doubt after a crash is answered to the
    model as a failed call whose outcome is unknown, not made again."""
    inner = node._awrap_tool_call

    async def journaled(
        request: ToolCallRequest, execute: Callable[[ToolCallRequest], Awaitable[Any]]
    ) -> Any:
        call = request.tool_call

        async def body() -> Any:
            done = _dump(await (inner(request, execute) if inner is not None else execute(request)))
            _made_now(var_child_runnable_config.get() or {})
            return done

        try:
            done = _load(await _operation(_RUN.get(), f"{graph}.{call['name']}", call["args"], body))
        except InDoubt as exc:
            return ToolMessage(
                f"The outcome of this {call['name']} call is unknown: it was interrupted and may or may "
                f"not have taken effect, and it will not be run again (operation {exc.operation_id}). "
                "Do not assume either outcome.",
                tool_call_id=call["id"] or "",
                name=call["name"],
                status="error",
            )
        if isinstance(done, (ToolMessage, Command)):
            return done
        # a reconciler's answer: the tool's output, made the call's message as the tool's would be
        content = done if isinstance(done, str) else json.dumps(done)
        return ToolMessage(content, tool_call_id=call["id"] or "", name=call["name"])

    return ToolNode(
        list(node.tools_by_name.values()),
        name=node.name or "tools",
        tags=list(node.tags or []),
        handle_tool_errors=node._handle_tool_errors,
        messages_key=node._messages_key,
        wrap_tool_call=node._wrap_tool_call,
        awrap_tool_call=journaled,
    )


async def _operation(run: Run, tool: str, args: dict[str, Any], body: Callable[[], Awaitable[Any]]) -> Any:
    """``run.call(tool, **args)``, whose dispatch runs ``body`` (through the tool's ``_dispatched``)."""
    token = _BODY.set(body)
    try:
        return await run.call(tool, **args)
    finally:
        _BODY.reset(token)


def _journaled(tool: str, bound: Runnable[Any, Any], answer: Any) -> Runnable[Any, Any]:
    """The node ``bound`` as one operation of the tool ``tool``: its update journaled once; its
    interrupts' answers of the type ``answer``."""

    async def node(state: Any, config: RunnableConfig) -> Any:
        try:
            run = _RUN.get()
        except LookupError:
            raise RuntimeError(f"node {tool!r} runs only inside its DurableGraph.run") from None
        step = (config.get("metadata") or {}).get("langgraph_step")
        answers: list[Any] = []  # the answers to the node's interrupts so far, in their order
        while True:
            done = await _execution(run, tool, bound, state, _resumed(config, answers), step, len(answers))
            if "interrupt" not in done:
                return _load(done)
            answers.append(await run.request(tool, done["interrupt"], response=cast(type[Any], answer)))

    return RunnableLambda(node, name=tool)


async def _execution(
    run: Run, tool: str, bound: Runnable[Any, Any], state: Any, config: RunnableConfig, step: Any, n: int
) -> dict[str, Any]:
    """One execution of a node, an operation: its update, or the value of the interrupt it
    raised (``{"interrupt": ...}``). The ``n``-th execution follows the node's ``n``-th answer."""

    async def body() -> Any:
        context = var_child_runnable_config.set(config)  # where interrupt() reads its answers
        try:
            update = _dump(await bound.ainvoke(state, config))
            _LIVE.get()[(config.get("metadata") or {}).get("langgraph_node", tool)] += 1
            return update
        except GraphInterrupt as exc:
            return {"interrupt": pydantic_core.to_jsonable_python(exc.args[0][0].value)}
        finally:
            var_child_runnable_config.reset(context)

    return cast(
        dict[str, Any], await _operation(run, tool, {"step": step, **({"answers": n} if n else {})}, body)
    )


def _made_now(config: RunnableConfig) -> None:
    """Count the ToolNode's execution whose call this is as made live (once, however many of its
    calls ran live): its ``updates`` chunk is streamed."""
    metadata = config.get("metadata") or {}
    node, task = metadata.get("langgraph_node"), metadata.get("langgraph_checkpoint_ns")
    counted = _LIVE_TASKS.get()
    if node is not None and task not in counted:
        counted.add(task)
        _LIVE.get()[node] += 1


def _made_live(updates: dict[str, Any]) -> dict[str, Any]:
    """The nodes' updates of an ``updates`` chunk that their nodes made now: a node served from the
    journal on a resume did its work before, and was streamed then."""
    live = _LIVE.get()
    fresh = {}
    for node, update in updates.items():
        if live[node] > 0:
            live[node] -= 1
            fresh[node] = update
    return fresh


def _resumed(config: RunnableConfig, answers: list[Any]) -> RunnableConfig:
    """The node's config, its interrupts answered by ``answers`` (LangGraph's own resume: the
    node runs again from its start, and its ``n``-th ``interrupt()`` returns the ``n``-th answer)."""
    if not answers:
        return config
    configurable = config.get("configurable") or {}
    scratchpad = configurable[CONFIG_KEY_SCRATCHPAD]
    fresh = dataclasses.replace(
        scratchpad, resume=list(answers), interrupt_counter=itertools.count().__next__
    )
    return {**config, "configurable": {**configurable, CONFIG_KEY_SCRATCHPAD: fresh}}


async def _dispatched(**args: Any) -> Any:
    """The function of every node's tool: the node's own code, handed to ``run.call``."""
    try:
        body = _BODY.get()
    except LookupError:
        raise RuntimeError("a graph node's tool runs only inside its graph (DurableGraph.run)") from None
    return await body()


def _register(app: App, name: str, effect: NodeEffect) -> None:
    app.tools[name] = Tool(
        name,
        _dispatched,
        "read" if effect.effect == "read" else "write",
        effect.effect == "idempotent",
        effect.retry,
        pydantic.create_model(f"{name}_args", __config__=_FREE),
        {},
        effect.timeout,
    )
    if effect.reconciler is not None:
        app.reconcilers[name] = _recorded_as_returned(effect.reconciler)


def _recorded_as_returned(reconcile: Reconciler) -> Reconciler:
    """The app's reconciler, its answer (the node's update) journaled as the node's own would be."""

    async def reconciled(args: dict[str, Any], action: Action) -> Any:
        answer = reconcile(args, action)
        if isinstance(answer, Awaitable):
            answer = await answer
        return answer if answer is NOT_EXECUTED else _dump(answer)

    return reconciled


def _dump(update: Any) -> dict[str, Any]:
    """A node's update as the journal keeps it: JSON as it is, anything else through LangGraph's
    serializer."""
    try:
        if json.loads(json.dumps(update)) == update:
            return {"json": update}
    except (TypeError, ValueError):
        pass
    kind, data = _SERDE.dumps_typed(update)
    return {"serde": kind, "data": base64.b64encode(data).decode()}


def _load(journaled: dict[str, Any]) -> Any:
    if "json" in journaled:
        return journaled["json"]
    return _SERDE.loads_typed((journaled["serde"], base64.b64decode(journaled["data"])))
