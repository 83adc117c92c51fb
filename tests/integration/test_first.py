"""``run.first``: waits that compose, on real Postgres and Redis through the test kit. The first
wait to be ready wins (one ``first`` journal entry, replayed the same), the others are withdrawn
(a request refuses its answer, an approval its decision), and the run waits meanwhile with no
worker held."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from outlast import AnswerRefused, DecisionRefused
from outlast._journal import args_hash
from outlast.testing import Harness, HarnessFactory, outlast_harness, outlast_servers
from tests.apps import asking

__all__ = ["outlast_harness", "outlast_servers"]  # the fixtures, without the plugin installed


@pytest.fixture
def h(outlast_harness: HarnessFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[Harness]:
    harness = outlast_harness(asking.app)
    asking.setup(harness.database_url, harness.schema)
    monkeypatch.setenv("OUTLAST_DATABASE_URL", harness.database_url)
    monkeypatch.setenv("OUTLAST_SCHEMA", harness.schema)
    yield harness


def kinds(h: Harness, run_id: str) -> list[tuple[str, str]]:
    return [(e["kind"], e["op"]) for e in h.journal(run_id)]


def test_an_answer_before_the_timer_wins_and_is_replayed_the_same(h: Harness) -> None:
    h.start_worker()
    rid = h.client.enqueue("race", {"seconds": 3600}).id
    run = h.wait(rid, "waiting")
    assert (run.reason, run.owner) == ("first", None)
    assert h.sql("SELECT wake_at IS NOT NULL FROM runs WHERE id = %s", rid) == [(True,)]  # the timer
    h.respond(rid, "op-1", 7)
    h.wait_for_request(rid, "op-4")
    h.respond(rid, "op-4", True)  # the run resumes: the race is replayed from its journal entry
    done = h.wait(rid)
    assert (done.state, done.result) == ("succeeded", {"which": 0, "value": 7, "confirmed": True}), (
        done.reason
    )
    assert kinds(h, rid) == [
        ("request", "op-1"),
        ("timer", "op-2"),
        ("first", "op-3"),
        ("request", "op-4"),
        ("response", "op-4"),
    ]
    (entry,) = [e for e in h.journal(rid) if e["kind"] == "first"]
    assert (entry["won"], entry["ops"], entry["outcome"]["value"]) == (0, ["op-1", "op-2"], 7)


def test_the_timer_wins_and_the_request_is_withdrawn(h: Harness) -> None:
    h.start_worker()
    rid = h.client.enqueue("race", {"seconds": 60}).id
    h.wait(rid, "waiting")
    h.advance(120)
    h.wait_for_request(rid, "op-4")
    with pytest.raises(AnswerRefused, match=r"request op-1: withdrawn: the run went on without it"):
        h.respond(rid, "op-1", 7)
    assert [r["id"] for r in h.requests(rid)] == ["op-4"]  # the loser is no longer listed
    h.respond(rid, "op-4", False)
    done = h.wait(rid)
    assert (done.state, done.result) == ("succeeded", {"which": 1, "value": None, "confirmed": False}), (
        done.reason
    )
    assert h.sql("SELECT op_id, status FROM requests WHERE run_id = %s ORDER BY op_id", rid) == [
        ("op-1", "withdrawn"),
        ("op-4", "answered"),
    ]


def test_a_child_ending_first_withdraws_the_approval(h: Harness) -> None:
    h.start_worker()
    rid = h.client.enqueue("child_or_approval", {"seconds": 60}).id
    run = h.wait(rid, "awaiting_approval")  # an approval among the waits: a decision finds it
    assert run.reason == "first"
    h.advance(120)  # the child's timer fires; its end wakes the parent
    done = h.wait(rid)
    assert (done.state, done.result) == ("succeeded", {"which": 0, "value": "slept"}), done.reason
    with pytest.raises(DecisionRefused, match="expired"):
        h.client.approve(rid, "op-2", approver="ops", comment="late", args_hash=args_hash({"text": "t"}))


def test_an_approval_first(h: Harness) -> None:
    h.start_worker()
    rid = h.client.enqueue("child_or_approval", {"seconds": 3600}).id
    h.wait(rid, "awaiting_approval")
    h.client.approve(rid, "op-2", approver="ops", comment="go", args_hash=args_hash({"text": "t"}))
    done = h.wait(rid)
    assert (done.state, done.result) == ("succeeded", {"which": 1, "value": "approved"}), done.reason
    assert [k for k, _ in kinds(h, rid)] == ["child", "approval", "first"]
