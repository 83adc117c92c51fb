"""OpenTelemetry spans, caught by the SDK's in-memory exporter: a span per run attempt, per
operation and per tool call, children of the producer's span, through a crash and a resume."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from dataclasses import fields
from datetime import UTC, datetime
from typing import Any, cast

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from outlast import App, Run, _tracing as tracing
from outlast._model import RunRecord
from outlast.errors import ServiceUnavailable
from outlast.store import Store
from outlast.testing import HarnessFactory, outlast_harness, outlast_servers
from outlast.worker.control import Interrupted
from outlast.worker.executor import Execution
from tests.apps.observed import app

__all__ = ["outlast_harness", "outlast_servers"]  # the fixtures, without the plugin installed


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """An in-memory exporter on the process's SDK provider (set here if none is), stopped after
    the test: the global provider can be set only once per process."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield exporter
    exporter.shutdown()


def named(spans: InMemorySpanExporter, prefix: str, run_id: str) -> list[ReadableSpan]:
    found = [
        s
        for s in spans.get_finished_spans()
        if s.name.startswith(prefix) and (s.attributes or {}).get("outlast.run.id") == run_id
    ]
    return sorted(found, key=lambda s: s.start_time or 0)


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def test_spans_of_a_run_continue_the_producers_trace(
    outlast_harness: HarnessFactory, spans: InMemorySpanExporter
) -> None:
    h = outlast_harness(app)
    with trace.get_tracer("producer").start_as_current_span("enqueue") as producer:
        run = h.client.enqueue("observed", {"n": 7})
    h.start_worker()
    assert h.wait(run.id).state == "succeeded"

    ctx = producer.get_span_context()
    [attempt] = named(spans, "run ", run.id)
    assert attempt.name == "run observed"
    assert attempt.context is not None and attempt.context.trace_id == ctx.trace_id
    assert parent_of(attempt) == ctx.span_id
    assert attrs(attempt) == {
        "outlast.run.id": run.id,
        "outlast.workflow": "observed",
        "outlast.fencing_token": 1,
        "outlast.attempt": 1,
        "outlast.outcome": "final",
        "outlast.state": "succeeded",
    }
    assert attempt.context is not None
    ops = named(spans, "operation ", run.id)
    assert [attrs(o)["outlast.tool"] for o in ops] == ["flaky", "llm", "broken", "note"]
    assert all(parent_of(o) == attempt.context.span_id for o in ops)
    outcomes = {attrs(o)["outlast.tool"]: attrs(o)["outlast.outcome"] for o in ops}
    assert outcomes == {"flaky": "ok", "llm": "ok", "broken": "error", "note": "ok"}
    assert [attrs(o)["outlast.operation.id"] for o in ops] == ["op-1", "op-2", "op-3", "op-4"]
    assert all(attrs(o)["outlast.fencing_token"] == 1 and not attrs(o)["outlast.resumed"] for o in ops)

    calls = [
        s for s in spans.get_finished_spans() if parent_of(s) in {o.context.span_id for o in ops if o.context}
    ]
    by_tool = {attrs(c)["outlast.tool"]: c for c in calls}
    assert set(by_tool) == {"flaky", "llm", "broken", "note"}
    assert by_tool["broken"].status.status_code == trace.StatusCode.ERROR
    assert attrs(by_tool["broken"])["error.type"] == "ValueError"
    model = by_tool["llm"]
    assert model.name == "chat tiny-model" and model.kind == trace.SpanKind.CLIENT
    assert attrs(model)["gen_ai.operation.name"] == "chat"
    assert attrs(model)["gen_ai.request.model"] == "tiny-model"
    assert attrs(model)["gen_ai.usage.input_tokens"] == 3
    assert attrs(model)["gen_ai.usage.output_tokens"] == 3
    assert "gen_ai.request.model" not in attrs(by_tool["note"])
    # No arguments or results unless asked for.
    everything = [attrs(s) for s in (attempt, *ops, *calls)]
    assert not any(k in a for a in everything for k in ("outlast.tool.args", "outlast.tool.result"))


def test_a_resumed_run_continues_the_same_trace(
    outlast_harness: HarnessFactory, spans: InMemorySpanExporter
) -> None:
    h = outlast_harness(app, hold_ms=60000)  # results held until the run's next write
    with trace.get_tracer("producer").start_as_current_span("enqueue") as producer:
        run = h.client.enqueue("observed", {"n": 1})
    h.crash_at("after_intention", "llm")  # before llm's dispatch, flaky's result held: lost
    h.start_worker()
    assert h.wait(run.id).state == "succeeded"

    ctx = producer.get_span_context()
    first, second = named(spans, "run ", run.id)
    for attempt in (first, second):  # both attempts: children of the producer's span
        assert attempt.context is not None and attempt.context.trace_id == ctx.trace_id
        assert parent_of(attempt) == ctx.span_id
    assert attrs(first)["outlast.outcome"] == "Crashed" and "outlast.state" not in attrs(first)
    assert first.status.status_code == trace.StatusCode.UNSET  # left for later, not failed
    assert (attrs(second)["outlast.attempt"], attrs(second)["outlast.fencing_token"]) == (2, 2)
    assert attrs(second)["outlast.outcome"] == "final"
    # On resume nothing was journaled (a read has no intention, and flaky's held result died with
    # its worker): every operation is live again, in the second attempt's trace.
    resumed = [o for o in named(spans, "operation ", run.id) if parent_of(o) == second.context.span_id]
    assert [(attrs(o)["outlast.tool"], attrs(o)["outlast.resumed"]) for o in resumed] == [
        ("flaky", False),
        ("llm", False),
        ("broken", False),
        ("note", False),
    ]
    assert all(attrs(o)["outlast.fencing_token"] == 2 for o in resumed)


def test_arguments_and_results_only_when_asked(
    outlast_harness: HarnessFactory, spans: InMemorySpanExporter
) -> None:
    h = outlast_harness(app)
    tracing.configure(payloads=True)
    try:
        run = h.client.enqueue("observed", {"n": 2})
        h.start_worker()
        assert h.wait(run.id).state == "succeeded"
    finally:
        tracing.configure(payloads=False)
    [note] = [
        s
        for s in spans.get_finished_spans()
        if s.name == "tool note" and attrs(s)["outlast.run.id"] == run.id
    ]
    assert attrs(note)["outlast.tool.args"] == '{"text": "done 2"}'
    assert attrs(note)["outlast.tool.result"] == '"done 2"'
    [attempt] = named(spans, "run ", run.id)
    assert parent_of(attempt) is None  # enqueued with no active span: a trace of its own
    assert h.client.status(run.id).trace_context is None


secret_app = App()
SECRET = f"tok-{uuid.uuid4().hex}"


@secret_app.tool("send", secret=["token"])
def send(token: str, text: str) -> str:
    return text


@secret_app.workflow("mail")
async def mail(run: Run) -> str:
    return await run.call(send, token=SECRET, text="hello")


def test_payloads_never_carry_a_secret_argument(
    outlast_harness: HarnessFactory, spans: InMemorySpanExporter
) -> None:
    h = outlast_harness(secret_app, secret_key="tR6v-Kx2Pm9Qz4Lb7Nw0Hc3Gj8Fs5Dy1E")
    tracing.configure(payloads=True)
    try:
        run = h.client.enqueue("mail", {})
        h.start_worker()
        assert h.wait(run.id).state == "succeeded"
    finally:
        tracing.configure(payloads=False)
    mine = [s for s in spans.get_finished_spans() if attrs(s).get("outlast.run.id") == run.id]
    [call] = [s for s in mine if s.name == "tool send"]
    args = json.loads(attrs(call)["outlast.tool.args"])
    assert args["text"] == "hello" and args["token"]["secret"].startswith("hmac-sha256:")
    assert SECRET not in json.dumps([attrs(s) for s in mine])


left_app = App()


@left_app.workflow("left")
async def left(run: Run) -> None:
    raise Interrupted("run 'r-left': Postgres out of reach; left for another worker")


class _Unreached:
    """A store no statement reaches: each of its families is itself, and none is called."""

    def __getattr__(self, name: str) -> _Unreached:
        return self


def test_a_run_left_for_later_is_not_an_error(spans: InMemorySpanExporter) -> None:
    """Interrupted (Postgres out of reach) leaves the run: the attempt's span says so, no error."""
    now = datetime.now(UTC)
    row: dict[str, Any] = {f.name: None for f in fields(RunRecord)}
    row |= {"id": "r-left", "workflow": "left", "input": {}, "fencing_token": 1, "attempts": 1}
    row |= {"journal_head": "", "journal_len": 0, "created_at": now, "updated_at": now}
    execution = Execution(run=RunRecord(**row), app=left_app, store=cast(Store, _Unreached()))
    with pytest.raises(ServiceUnavailable):
        asyncio.run(execution.execute())
    [attempt] = named(spans, "run ", "r-left")
    assert attrs(attempt)["outlast.outcome"] == "ServiceUnavailable"
    assert attempt.status.status_code == trace.StatusCode.UNSET and "error.type" not in attrs(attempt)
