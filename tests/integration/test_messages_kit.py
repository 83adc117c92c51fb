"""outlast.testing and messages: the harness sends, fires a run's callback as the endpoint takes
it, and skips time through a ``receive`` timeout (the schema's clock moved, nothing waited)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from outlast.testing import Harness, HarnessFactory, outlast_harness, outlast_servers
from tests.apps import chat

__all__ = ["outlast_harness", "outlast_servers"]  # the fixtures, without the plugin installed

KEY = "s" * 40


@pytest.fixture
def h(outlast_harness: HarnessFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[Harness]:
    harness = outlast_harness(chat.app, secret_key=KEY)
    chat.setup(harness.database_url, harness.schema)
    monkeypatch.setenv("OUTLAST_DATABASE_URL", harness.database_url)
    monkeypatch.setenv("OUTLAST_SCHEMA", harness.schema)
    harness.start_worker()
    yield harness


def test_the_kit_sends_and_skips_time_through_a_receive_timeout(h: Harness) -> None:
    day = h.client.enqueue("patient", {"timeout": 86400})
    talk = h.client.enqueue("converse", {"turns": 1})
    h.wait(day.id, "waiting")
    assert h.send(talk.id, "in", "hello").duplicate is False
    assert h.wait(talk.id).result == ["hello"]
    started = time.monotonic()
    h.advance(86400)
    assert h.wait(day.id, timeout=10).result == {"got": None}  # a day, skipped
    assert time.monotonic() - started < 10


def test_the_kit_fires_a_callback(h: Harness) -> None:
    run = h.client.enqueue("hook")
    h.wait(run.id, "waiting")
    [(url,)] = h.sql("SELECT message->>'url' FROM handled WHERE run_id = %s", run.id)
    assert h.callback_url(run.id, "paid") == url  # the URL the tool was given
    [shown] = [e["args"]["message"]["url"] for e in h.journal(run.id) if e["kind"] == "intention"]
    assert shown == "/callbacks/[secret]"  # the journal holds it masked
    assert h.fire_callback(url + "x", {"paid": True}) == (404, {"error": "not a callback"})
    status, answer = h.fire_callback(url, {"paid": True}, idempotency_key="evt-9")
    assert (status, answer) == (202, {"accepted": True, "duplicate": False})
    assert h.fire_callback(url, {"paid": True}, idempotency_key="evt-9")[1]["duplicate"] is True
    result: Any = h.wait(run.id).result
    assert result["paid"] == {"paid": True}
