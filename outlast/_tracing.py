"""outlast makes OpenTelemetry spans: one per run attempt, per operation and per tool call (the
``otel`` extra).

outlast speaks only the OpenTelemetry API; the application configures the SDK (a
``TracerProvider`` and its exporter, e.g. in the module that defines the app). Without
opentelemetry installed, or with no provider configured, every span here is skipped at the cost of
one check. The producer's trace context is stored on the run at enqueue (``carrier``) and every
attempt of the run, on whichever worker, is a child of the producer's span.

Spans carry run id, operation id, tool, fencing token and outcome, never a tool's arguments or
result unless ``OUTLAST_TRACE_PAYLOADS=on`` (and then the arguments as journaled: a secret one
sealed). A tool declared ``kind="model"`` gets the GenAI
semantic-convention attributes: its model, and the token counts it reports with
``current_action().charge(input_tokens=..., output_tokens=...)``.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from enum import Enum
from typing import TYPE_CHECKING, Any

from outlast.errors import Fenced, ServiceUnavailable

if TYPE_CHECKING:
    from outlast._model import RunRecord
    from outlast.action import Action
    from outlast.app import Tool

_payloads = False
# The API loads a provider named in the environment on its first ask; asking reads the environment
# on every call while no provider is set (tracing off), so outlast reads it once, here.
_BY_ENV = "OTEL_PYTHON_TRACER_PROVIDER" in os.environ
_UNKNOWN = object()
_cache: tuple[object, Any] | None = None  # (provider, its tracer)
# What an exception escaping a span says as its outcome; others say their type's name.
_OUTCOMES = {
    "ToolError": "error",
    "InDoubt": "in_doubt",
    "PolicyRefused": "refused",
    "HandOver": "handed_over",
    "Paused": "paused",
}
# What leaves a run for later (as any BaseException does: Interrupted, HandOver, a crash): its run
# or operation span gets the outcome, not an error status. A tool's exception is always an error.
_LEFT: tuple[type[Exception], ...] = (ServiceUnavailable, Fenced)
_USAGE = {"input_tokens": "gen_ai.usage.input_tokens", "output_tokens": "gen_ai.usage.output_tokens"}


def configure(payloads: bool) -> None:
    """Once, at the worker's start: whether tool arguments and results go into spans."""
    global _payloads
    _payloads = payloads


def _api() -> Any:
    """The API's ``opentelemetry.trace`` once something loaded it (the app configuring its SDK),
    else None: no provider can be set before. outlast imports it only for a provider named in the
    environment (it costs a worker that does not trace 0.2-0.5 MB of RSS)."""
    loaded = sys.modules.get("opentelemetry.trace")
    if loaded is not None or not _BY_ENV:
        return loaded
    try:
        from opentelemetry import trace
    except ImportError:  # pragma: no cover - the otel extra is not installed
        return None
    return trace


def _tracer() -> Any:
    """outlast's tracer, or None when no SDK provider is configured (nothing would be recorded)."""
    global _cache
    trace = _api()
    if trace is None:
        return None
    provider: Any = getattr(trace, "_TRACER_PROVIDER", _UNKNOWN)  # set once (None: not yet)
    if provider is None and not _BY_ENV:
        return None
    if provider is _UNKNOWN or provider is None:  # an API that keeps it elsewhere, or to be loaded
        provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return None
    if _cache is None or _cache[0] is not provider:
        _cache = (provider, provider.get_tracer("outlast"))
    return _cache[1]


def carrier() -> dict[str, str] | None:
    """The current trace context (``traceparent``, ``tracestate``) to store on a run at enqueue;
    None when there is no active span."""
    trace = sys.modules.get("opentelemetry.trace")  # not loaded: no span can be current
    if trace is None or not trace.get_current_span().get_span_context().is_valid:
        return None
    from opentelemetry import propagate

    out: dict[str, str] = {}
    propagate.inject(out)
    return out or None


class Mark:
    """A span as the engine sees it: attributes to add; does nothing for a skipped span."""

    def __init__(self, span: Any = None) -> None:
        self._span = span
        self.outcome: str | None = None

    def set(self, **attributes: Any) -> None:
        """Set ``outlast.<name>`` attributes, skipping None (``outcome`` is the span's outcome)."""
        if self._span is None:
            return
        self.outcome = attributes.get("outcome", self.outcome)
        for name, value in attributes.items():
            if value is not None:
                self._span.set_attribute(f"outlast.{name}", str(value) if isinstance(value, Enum) else value)

    def result(self, value: Any) -> None:
        """A tool's result: recorded only when payloads were asked for."""
        if self._span is not None and _payloads:
            self._span.set_attribute("outlast.tool.result", json.dumps(value, default=str))

    def usage(self, charges: Mapping[str, float]) -> None:
        """The token counts a model tool reported through ``charge``."""
        if self._span is None:
            return
        for name, attribute in _USAGE.items():
            if name in charges:
                self._span.set_attribute(attribute, int(charges[name]))


_SKIPPED = nullcontext(Mark())  # what every span is when nothing would be recorded


@contextmanager
def _span(
    tracer: Any,
    name: str,
    kind: Any,
    attributes: dict[str, Any],
    parent: Any = None,
    left: tuple[type[Exception], ...] = _LEFT,
) -> Iterator[Mark]:
    with tracer.start_as_current_span(
        name,
        context=parent,
        kind=kind,
        attributes=attributes,
        record_exception=False,  # its message may quote arguments: only its type is kept
        set_status_on_exception=False,
    ) as span:
        mark = Mark(span)
        try:
            yield mark
        except BaseException as exc:
            kind_of = type(exc).__name__
            span.set_attribute("outlast.outcome", _OUTCOMES.get(kind_of, kind_of))
            if isinstance(exc, Exception) and not isinstance(exc, left):  # not left for later
                from opentelemetry.trace import Status, StatusCode

                span.set_attribute("error.type", kind_of)
                span.set_status(Status(StatusCode.ERROR, kind_of))
            raise
        if mark.outcome is None:
            span.set_attribute("outlast.outcome", "ok")


def run_attempt(run: RunRecord, token: int) -> AbstractContextManager[Mark]:
    """The span of one attempt of ``run`` (a child of the producer's span when it had one)."""
    tracer = _tracer()
    if tracer is None:
        return _SKIPPED
    from opentelemetry import propagate
    from opentelemetry.trace import SpanKind

    parent = propagate.extract(run.trace_context) if run.trace_context else None
    attributes = {
        "outlast.run.id": run.id,
        "outlast.workflow": run.workflow,
        "outlast.fencing_token": token,
        "outlast.attempt": run.attempts,
    }
    return _span(tracer, f"run {run.workflow}", SpanKind.CONSUMER, attributes, parent)


def operation(
    run_id: str, op_id: str, tool: str, token: int, resumed: bool = False
) -> AbstractContextManager[Mark]:
    """The span of one operation that is not served wholly from the journal: live (policy,
    budget, intention, dispatch, result), or a gap resolved after a takeover (``resumed``)."""
    tracer = _tracer()
    if tracer is None:
        return _SKIPPED
    from opentelemetry.trace import SpanKind

    attributes = {
        "outlast.run.id": run_id,
        "outlast.operation.id": op_id,
        "outlast.tool": tool,
        "outlast.fencing_token": token,
        "outlast.resumed": resumed,
    }
    return _span(tracer, f"operation {tool}", SpanKind.INTERNAL, attributes)


def tool_call(tool: Tool, action: Action, args: dict[str, Any]) -> AbstractContextManager[Mark]:
    """The span of one dispatch of a tool; a model tool's carries the GenAI attributes (the
    token counts it charged are read when it returns). ``args`` as journaled: secrets sealed."""
    tracer = _tracer()
    if tracer is None:
        return _SKIPPED
    from opentelemetry.trace import SpanKind

    attributes: dict[str, Any] = {
        "outlast.run.id": action.run_id,
        "outlast.operation.id": action.operation_id,
        "outlast.tool": tool.name,
        "outlast.fencing_token": action.fencing_token,
    }
    if _payloads:
        attributes["outlast.tool.args"] = json.dumps(args, default=str)
    if tool.kind != "model":
        return _span(tracer, f"tool {tool.name}", SpanKind.INTERNAL, attributes, left=())
    attributes["gen_ai.operation.name"] = "chat"
    if tool.model:
        attributes["gen_ai.request.model"] = tool.model
    return _model_span(tracer, f"chat {tool.model or tool.name}", attributes, action)


@contextmanager
def _model_span(tracer: Any, name: str, attributes: dict[str, Any], action: Action) -> Iterator[Mark]:
    from opentelemetry.trace import SpanKind

    with _span(tracer, name, SpanKind.CLIENT, attributes, left=()) as mark:
        try:
            yield mark
        finally:
            mark.usage(action.charges)
