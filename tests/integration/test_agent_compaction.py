"""A summarising compaction in a pydantic-ai agent run durably: the summary the model writes is a
model request like any other, journaled as an operation of the agent's model with its capture, and
a resume serves it from the journal rather than asking the model to summarise again. The requests
after it store only the messages no capture stored before, and each shows whole."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from outlast._captured import requests
from outlast.testing import HarnessFactory
from tests.apps import compacting


@pytest.fixture
def summaries(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    monkeypatch.setattr(compacting, "SUMMARIES", [])
    yield compacting.SUMMARIES


def test_a_summary_is_a_journaled_model_request_and_a_resume_does_not_ask_for_it_again(
    outlast_harness: HarnessFactory, summaries: list[str]
) -> None:
    h = outlast_harness(compacting.app)
    h.start_worker()
    rid = h.client.enqueue("reading", {"steps": 6, "then": 2}).id
    h.wait(rid, "waiting")
    assert len(summaries) == 1  # the read at step AT asked for it, once
    entries = h.client.journal(rid)
    whole = requests(entries)
    asked = [
        e.op_id
        for e in entries
        if e.kind == "capture"
        and whole[e.seq]["request"]["messages"][0]["parts"][0].get("content", "")
        and str(whole[e.seq]["request"]["messages"][0]["parts"][0]["content"]).startswith(compacting.ASK)
    ]
    assert len(asked) == 1  # the summary's request, captured as the agent's model's operation
    results = {e.op_id: e.fields for e in entries if e.kind == "result"}
    assert "asked 6" in str(results[asked[0]])  # and its response journaled

    h.client.send(rid, "go", "on")  # the run is replayed past the compaction, then goes on
    h.wait(rid, "succeeded")
    assert len(summaries) == 1  # served from the journal: the model did not summarise again
    entries = h.client.journal(rid)
    captures = [e for e in entries if e.kind == "capture"]
    whole = requests(entries)
    assert all("withheld" not in whole[e.seq] for e in captures)  # each shown whole
    stored = [k for e in captures for k in e.fields.get("new", {})]
    assert len(stored) == len(set(stored))  # no message stored twice, across the compaction too
    assert h.client.verify(rid) is None
