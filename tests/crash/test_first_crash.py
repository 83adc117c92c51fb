"""``run.first`` under a real kill: a worker SIGKILLed after the race's outcome is journaled and
before the losing request is withdrawn. The next worker finds the outcome in the journal (the same
winner) and withdraws the loser then; the loser's answer is refused."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from outlast import AnswerRefused
from outlast.testing import Harness, HarnessFactory, outlast_harness, outlast_servers
from tests.apps import asking

__all__ = ["outlast_harness", "outlast_servers"]  # the fixtures, without the plugin installed

pytestmark = pytest.mark.crash


@pytest.fixture
def h(outlast_harness: HarnessFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[Harness]:
    harness = outlast_harness(asking.app, app_spec="tests.apps.asking:app")
    asking.setup(harness.database_url, harness.schema)
    monkeypatch.setenv("OUTLAST_DATABASE_URL", harness.database_url)
    monkeypatch.setenv("OUTLAST_SCHEMA", harness.schema)
    yield harness


def test_killed_between_the_outcome_and_the_withdrawal(h: Harness) -> None:
    h.start_worker()
    rid = h.client.enqueue("race", {"seconds": 60}).id
    assert h.wait(rid, "waiting").reason == "first"
    h.stop_worker()
    h.advance(120)  # the timer wins
    h.kill_at("with_result_held", tool="withdraw")  # a real worker: the outcome journaled, then killed
    journaled = [(e["kind"], e["op"]) for e in h.journal(rid)]
    assert journaled[-1] == ("first", "op-3")
    assert h.sql("SELECT status FROM requests WHERE run_id = %s AND op_id = 'op-1'", rid) == [("pending",)]

    h.start_worker()  # takes the run over once the lease expired
    h.wait_for_request(rid, "op-4")
    assert h.sql("SELECT status FROM requests WHERE run_id = %s AND op_id = 'op-1'", rid) == [("withdrawn",)]
    with pytest.raises(AnswerRefused, match="withdrawn"):
        h.respond(rid, "op-1", 7)
    h.respond(rid, "op-4", True)
    done = h.wait(rid)
    assert (done.state, done.result) == ("succeeded", {"which": 1, "value": None, "confirmed": True}), (
        done.reason
    )
    assert [e["kind"] for e in h.journal(rid)].count("first") == 1
