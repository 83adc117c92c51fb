"""This module makes each model call of an OpenAI Agents SDK run one outlast operation.

``JournaledModel`` wraps any SDK ``Model``: inside a run (``scope`` set by ``DurableAgent.run``),
its ``get_response`` is a call of the tool ``AGENT:model`` (``run.call``) whose dispatch captures
what the model receives (``current_action().capture``: the input items, the instructions, the
settings and the names of the tools and handoffs offered), asks the wrapped model, charges the
response's token usage to the run's budget, and returns the response as JSON. The journal keeps
that JSON, so a resumed run is served the response and the model is never asked again; one in
flight when its worker died is asked again (a model call has no effect in the world, only a cost).

``JournaledProvider`` wraps the run's ``ModelProvider`` (``RunConfig.model_provider``), so that
an agent whose model is named by a string is journaled too.
"""

from __future__ import annotations

import contextvars
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pydantic
import pydantic_core
from agents.items import ModelResponse, TResponseStreamEvent
from agents.models.interface import Model, ModelProvider, ModelTracing
from openai.types.responses import ResponseCompletedEvent, ResponseOutputItemDoneEvent, ResponseTextDeltaEvent

from outlast.action import NOT_EXECUTED, Action, current_action

if TYPE_CHECKING:
    from outlast.worker.run import Run

_RESPONSE: pydantic.TypeAdapter[ModelResponse] = pydantic.TypeAdapter(ModelResponse)
_COMPLETED: pydantic.TypeAdapter[ResponseCompletedEvent] = pydantic.TypeAdapter(ResponseCompletedEvent)


@dataclass(frozen=True)
class Scope:
    """One agent run inside one outlast run: the run, the names of its outlast tools, and the
    arguments approved for the tool calls not made yet (by call id)."""

    run: Run
    name: str  # the DurableAgent's name: its model tool is ``NAME:model``, its tools ``NAME.TOOL``
    usage_budget: str
    approved: dict[str, dict[str, Any]] = field(default_factory=dict)


SCOPE: contextvars.ContextVar[Scope] = contextvars.ContextVar("outlast_openai_agents_scope")
BODY: contextvars.ContextVar[Callable[[dict[str, Any]], Awaitable[Any]]] = contextvars.ContextVar(
    "outlast_openai_agents_body"
)


async def dispatched(**args: Any) -> Any:
    """The function of every tool this integration registers: the body ``call`` handed over."""
    try:
        body = BODY.get()
    except LookupError:
        raise RuntimeError("an agent's operation runs only inside DurableAgent.run") from None
    return await body(args)


async def call(
    run: Run, tool: str, args: dict[str, Any], body: Callable[[dict[str, Any]], Awaitable[Any]]
) -> Any:
    """``run.call(tool, **args)``, whose dispatch runs ``body`` with the journaled arguments."""
    token = BODY.set(body)
    try:
        return await run.call(tool, **args)
    finally:
        BODY.reset(token)


def not_executed(args: dict[str, Any], action: Action) -> Any:
    """A model call has no effect in the world: one interrupted is simply sent again."""
    return NOT_EXECUTED


def dump_response(response: ModelResponse) -> dict[str, Any]:
    """A model response as the journal keeps it (fields the model did not set left out, so that
    the items sent back to the model on the next turn are the same live and replayed)."""
    return dict(_RESPONSE.dump_python(response, mode="json", exclude_unset=True))


def load_response(journaled: dict[str, Any]) -> ModelResponse:
    return _RESPONSE.validate_python(journaled)


def _request(
    instructions: str | None, input: Any, settings: Any, tools: list[Any], handoffs: list[Any]
) -> dict[str, Any]:
    """What the model receives, as the operation captures it."""
    return {
        "messages": pydantic_core.to_jsonable_python(
            [{"role": "user", "content": input}] if isinstance(input, str) else input, fallback=repr
        ),
        "instructions": instructions,
        "settings": pydantic_core.to_jsonable_python(settings, fallback=repr),
        "tools": [getattr(t, "name", type(t).__name__) for t in tools],
        "handoffs": [h.tool_name for h in handoffs],
    }


class JournaledModel(Model):
    """``model``, each of its calls an operation of the run in scope (none outside a run)."""

    def __init__(self, model: Model, name: str) -> None:
        self.model = model
        self.model_name = name

    async def get_response(
        self,
        system_instructions: str | None,
        input: Any,
        model_settings: Any,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: Any,
    ) -> ModelResponse:
        async def ask() -> ModelResponse:
            return await self.model.get_response(
                system_instructions,
                input,
                model_settings,
                tools,
                output_schema,
                handoffs,
                tracing,
                previous_response_id=previous_response_id,
                conversation_id=conversation_id,
                prompt=prompt,
            )

        scope = SCOPE.get(None)
        if scope is None:
            return await ask()

        async def body(args: dict[str, Any]) -> Any:
            action = current_action()
            action.capture(_request(system_instructions, input, model_settings, tools, handoffs))
            response = await ask()
            tokens = response.usage.input_tokens + response.usage.output_tokens
            if tokens:
                action.charge(**{scope.usage_budget: tokens})
            return dump_response(response)

        return load_response(await call(scope.run, f"{scope.name}:model", {"model": self.model_name}, body))

    def stream_response(
        self,
        system_instructions: str | None,
        input: Any,
        model_settings: Any,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: Any,
    ) -> AsyncIterator[TResponseStreamEvent]:
        def stream() -> AsyncIterator[TResponseStreamEvent]:
            return self.model.stream_response(
                system_instructions,
                input,
                model_settings,
                tools,
                output_schema,
                handoffs,
                tracing,
                previous_response_id=previous_response_id,
                conversation_id=conversation_id,
                prompt=prompt,
            )

        scope = SCOPE.get(None)
        if scope is None:
            return stream()
        request = _request(system_instructions, input, model_settings, tools, handoffs)
        return self._streamed(scope, request, stream)

    async def _streamed(
        self, scope: Scope, request: dict[str, Any], stream: Callable[[], AsyncIterator[TResponseStreamEvent]]
    ) -> AsyncIterator[TResponseStreamEvent]:
        """One streamed model call as an operation: the model's events are taken whole inside it,
        their text sent live to the run's readers (``current_action().stream``) as it comes, and
        its completed response journaled. The SDK is then given the events live (the completed
        one as journaled), or, on a resume, the journaled completed response alone."""
        events: list[TResponseStreamEvent] = []

        async def body(args: dict[str, Any]) -> Any:
            action = current_action()
            action.capture(request)
            events.clear()  # a retried dispatch starts again
            done: list[Any] = []
            async for event in stream():
                events.append(event)
                if isinstance(event, ResponseTextDeltaEvent) and event.delta:
                    action.stream(event.delta)
                elif isinstance(event, ResponseOutputItemDoneEvent):
                    done.append(event.item)
            completed = next((e for e in events if isinstance(e, ResponseCompletedEvent)), None)
            if completed is None:
                raise RuntimeError("the model's stream ended with no response.completed event")
            if not completed.response.output and done:  # as the SDK does: items sent only as done
                completed.response.output = done
            usage = completed.response.usage
            if usage is not None and usage.input_tokens + usage.output_tokens:
                action.charge(**{scope.usage_budget: usage.input_tokens + usage.output_tokens})
            return _COMPLETED.dump_python(completed, mode="json", exclude_unset=True)

        journaled = _COMPLETED.validate_python(
            await call(scope.run, f"{scope.name}:model", {"model": self.model_name}, body)
        )
        for event in events:
            yield journaled if isinstance(event, ResponseCompletedEvent) else event
        if not events:  # a resume: the journaled response is the whole stream
            yield journaled

    async def close(self) -> None:
        await self.model.close()


class JournaledProvider(ModelProvider):
    """``provider``, each model it gives journaled (``JournaledModel``)."""

    def __init__(self, provider: ModelProvider) -> None:
        self.provider = provider

    def get_model(self, model_name: str | None) -> Model:
        return JournaledModel(self.provider.get_model(model_name), model_name or "default")

    async def aclose(self) -> None:
        await self.provider.aclose()
