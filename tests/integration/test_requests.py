"""Typed requests on real Postgres and Redis, through the test kit (``outlast.testing``): a run
publishes a request and waits with no worker held; an answer is checked against the response
type's JSON schema; the first valid one stands, the same one again is accepted, another refused;
an expired request ends the wait with ``RequestExpired``. Effects are counted in the world of
tests/apps/asking.py (``items``, ``applied``), not only in the journal."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from outlast import AnswerForbidden, AnswerRefused, AsyncClient, InvalidInput
from outlast._bundle import export
from outlast._replay import Verdict
from outlast.testing import Harness, HarnessFactory, assert_replays, outlast_harness, outlast_servers
from tests.apps import asking

__all__ = ["outlast_harness", "outlast_servers"]  # the fixtures, without the plugin installed

YES = {"operation_id": "op-42", "choice": "approve", "comment": "External business decision."}


@pytest.fixture
def h(outlast_harness: HarnessFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[Harness]:
    harness = outlast_harness(asking.app)
    asking.setup(harness.database_url, harness.schema)
    monkeypatch.setenv("OUTLAST_DATABASE_URL", harness.database_url)
    monkeypatch.setenv("OUTLAST_SCHEMA", harness.schema)
    yield harness


def kinds(h: Harness, run_id: str) -> list[tuple[str, str]]:
    return [(e["kind"], e["op"]) for e in h.journal(run_id)]


def items(h: Harness) -> list[tuple[str, str]]:
    return [(op, c) for op, c in h.sql("SELECT operation_id, comment FROM items ORDER BY id")]


def test_the_first_valid_answer_stands(h: Harness) -> None:
    h.start_worker()
    rid = h.client.enqueue("backlog", {"operation_id": "op-42", "draft": "pilot", "responders": ["ops"]}).id
    run = h.wait(rid, "waiting")
    assert (run.reason, run.owner, run.lease_expires_at) == ("request", None, None)  # no worker held
    (req,) = h.requests(rid)
    assert (req["id"], req["name"], req["payload"]) == (
        "op-2",
        "BusinessApprovalV1",
        {"operation_id": "op-42", "draft": "pilot"},
    )
    assert req["response_schema"]["title"] == "ApprovalDecision" and req["responders"] == ["ops"]

    # Refused, naming the run, the request and the way out; nothing stored.
    bad = {**YES, "choice": "maybe"}
    with pytest.raises(AnswerRefused, match=r"run '.*', request op-2: the answer.choice must be one of"):
        h.respond(rid, "op-2", bad, by="ops")
    with pytest.raises(AnswerRefused, match=r"the answer\.extra is not a field"):
        h.respond(rid, "op-2", {**YES, "extra": 1}, by="ops")
    with pytest.raises(AnswerRefused, match="lacks 'comment'"):
        h.respond(rid, "op-2", {"operation_id": "op-42", "choice": "approve"}, by="ops")
    with pytest.raises(AnswerForbidden, match="'mallory' may not answer"):
        h.respond(rid, "op-2", YES, by="mallory")
    with pytest.raises(InvalidInput, match=r"request op-2: the answer is refused: the value holds NaN"):
        h.respond(rid, "op-2", {**YES, "comment": float("nan")}, by="ops")
    with pytest.raises(AnswerRefused, match="no such request"):
        h.respond(rid, "op-9", YES, by="ops")
    assert h.sql("SELECT status, answer FROM requests WHERE run_id = %s", rid) == [("pending", None)]
    assert h.client.status(rid).state == "waiting"

    first = h.respond(rid, "op-2", YES, by="ops")
    assert (first.again, first.by, first.value) == (False, "ops", YES)
    done = h.wait(rid)
    assert done.state == "succeeded", done.reason
    assert done.result is not None
    assert done.result["type"] == "ApprovalDecision" and done.result["comment"] == YES["comment"]
    assert items(h) == [("op-42", YES["comment"])]

    # The same answer again: accepted, says so, changes nothing; a different one: refused.
    again = h.respond(rid, "op-2", dict(reversed(list(YES.items()))), by="ops")
    assert (again.again, again.by) == (True, "ops")
    with pytest.raises(AnswerRefused, match="already answered by ops; a different answer is refused"):
        h.respond(rid, "op-2", {**YES, "choice": "reject"}, by="ops")
    assert h.requests(rid) == []  # none pending
    (row,) = h.client.requests(rid, pending=False)
    assert (row["status"], row["answer"], row["answered_by"]) == ("answered", YES, "ops")
    assert kinds(h, rid) == [
        ("intention", "op-1"),
        ("result", "op-1"),
        ("request", "op-2"),
        ("response", "op-2"),
        ("intention", "op-3"),
        ("result", "op-3"),
    ]
    assert [e["kind"] for e in h.events(rid)].count("answered") == 1


def test_the_answer_is_typed_and_the_same_on_replay(h: Harness) -> None:
    h.start_worker()
    rid = h.client.enqueue("count", {"n": 2}).id
    h.wait(rid, "waiting")
    with pytest.raises(AnswerRefused, match="must be integer, got string"):
        h.respond(rid, "op-1", "3")
    h.respond(rid, "op-1", 3)
    h.wait_for_request(rid, "op-2")
    # The row is not what a resume reads: the journal is (altered here, the answer stays 3).
    h.sql("UPDATE requests SET answer = '99' WHERE run_id = %s AND op_id = 'op-1'", rid)
    h.respond(rid, "op-2", 4.0)  # an integer, as JSON says: the workflow gets an int
    done = h.wait(rid)
    assert (done.state, done.result) == ("succeeded", [3, 4]), done.reason
    assert [e.get("value") for e in h.journal(rid) if e["kind"] == "response"] == [3, 4.0]


def test_an_expired_request_ends_the_wait_with_request_expired(h: Harness) -> None:
    h.start_worker()
    rid = h.client.enqueue("backlog", {"operation_id": "op-7", "draft": "d", "expires_in": 60}).id
    h.wait(rid, "waiting")
    h.advance(120)
    done = h.wait(rid)
    assert done.state == "timed_out" and "request op-2 (BusinessApprovalV1) expired unanswered" in (
        done.reason or ""
    )
    with pytest.raises(AnswerRefused, match="request op-2: the request expired at"):
        h.respond(rid, "op-2", {**YES, "operation_id": "op-7"})
    assert items(h) == [] and h.requests(rid) == []
    assert [e["kind"] for e in h.journal(rid)][-2:] == ["request", "response"]


def test_a_final_run_refuses_a_pending_request_answer(h: Harness) -> None:
    h.start_worker()
    rid = h.client.enqueue("backlog", {"operation_id": "op-8", "draft": "d"}).id
    h.wait(rid, "waiting")
    h.client.cancel(rid)
    h.wait(rid)
    with pytest.raises(AnswerRefused, match=r"the run is cancelled, not waiting on this request"):
        h.respond(rid, "op-2", {**YES, "operation_id": "op-8"})
    assert h.sql("SELECT status FROM requests WHERE run_id = %s", rid) == [("pending",)]


def test_a_program_answers_with_a_model_and_an_unknown_run_is_refused(h: Harness) -> None:
    h.start_worker()
    rid = h.client.enqueue("backlog", {"operation_id": "op-9", "draft": "d"}).id
    h.wait(rid, "waiting")
    answer: Any = asking.ApprovalDecision(operation_id="op-9", choice="reject", comment="not now")
    assert not h.respond(rid, "op-2", answer).again
    done = h.wait(rid)
    assert done.result is not None and (done.result["choice"], done.result["item"]) == ("reject", None)
    with pytest.raises(Exception, match="no-such-run"):
        h.respond("no-such-run", "op-2", YES)


def cli(h: Harness, *args: str) -> subprocess.CompletedProcess[str]:
    env = h._process_env()  # the harness's servers, schema and prefix, as a worker process gets them
    return subprocess.run(
        [sys.executable, "-m", "outlast", *args], env=env, capture_output=True, text=True, timeout=60
    )


def test_the_cli_lists_and_answers(h: Harness) -> None:
    h.start_worker()
    rid = h.client.enqueue("backlog", {"operation_id": "op-42", "draft": "pilot", "responders": ["ops"]}).id
    h.wait(rid, "waiting")
    shown = cli(h, "requests", rid)
    assert shown.returncode == 0, shown.stderr
    assert "op-2  BusinessApprovalV1  pending (responders: ops)" in shown.stdout
    assert 'choice: "approve"|"reject"' in shown.stdout and "comment: string" in shown.stdout
    bad = cli(h, "respond", rid, "op-2", json.dumps({**YES, "choice": "maybe"}), "--by", "ops")
    assert bad.returncode == 1 and "the answer.choice must be one of" in bad.stderr, bad.stderr
    assert "Traceback" not in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    ok = cli(h, "respond", rid, "op-2", json.dumps(YES), "--by", "ops")
    assert ok.returncode == 0 and "request op-2 answered by ops" in ok.stdout, ok.stderr
    assert h.wait(rid).state == "succeeded"
    again = cli(h, "respond", rid, "op-2", json.dumps(YES), "--by", "ops")
    assert again.returncode == 0 and "already answered so by ops; nothing changed" in again.stdout
    other = cli(h, "respond", rid, "op-2", json.dumps({**YES, "comment": "other"}), "--by", "ops")
    assert other.returncode == 1 and "a different answer is refused" in other.stderr
    assert items(h) == [("op-42", YES["comment"])]
    everything = cli(h, "requests", rid, "--all")
    assert "answered (responders: ops)" in everything.stdout and "by ops" in everything.stdout


def test_a_run_with_requests_replays_offline(h: Harness, tmp_path: Path) -> None:
    h.start_worker()
    done_id = h.client.enqueue("race", {"seconds": 3600}).id
    h.wait(done_id, "waiting")
    h.respond(done_id, "op-1", 7)
    h.wait_for_request(done_id, "op-4")
    waiting_id = h.client.enqueue("count", {"n": 2}).id
    h.wait(waiting_id, "waiting")
    h.respond(done_id, "op-4", True)
    assert h.wait(done_id).state == "succeeded"

    for rid in (done_id, waiting_id):
        out = tmp_path / rid

        async def go(rid: str = rid, out: Path = out) -> None:
            async with AsyncClient(settings=h.settings) as c:
                await export(c, rid, out)

        asyncio.run(go())
        report = assert_replays(out, asking.app)
        assert report.verdict == Verdict.AGREES, report
    assert "journal end at op-1: next the code asks the answer to request op-1 (number 0)" in report.where
