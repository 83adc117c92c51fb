"""The examples end to end, on real servers, with real worker processes killed where the seeds say.

research_report (seed 003): the uncertain publish, crashed after the effect and after the
intention, and a lookup that cannot answer. backlog_approval (seed 004): its four interruption
windows, each counted in ``approved_backlog_items``.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from examples import backlog_approval, pending_approval, research_report
from outlast import Client, RunRecord
from outlast.errors import DecisionRefused
from tests.conftest import World, wait_for

REPORT = "examples.research_report:app"
BACKLOG = "examples.backlog_approval:app"
DRAFT = {"title": "Regional pilot", "region": "Lyon", "items": ["onboard 3 stores", "weekly review"]}
DECISION = {"approver": "product", "comment": "External business decision."}


@pytest.fixture
def client(world: World) -> Iterator[Client]:
    with Client(settings=world.settings()) as c:
        yield c
    world.stop_all()
    with psycopg.connect(world.database_url, autocommit=True) as conn:  # the examples' own tables
        for schema in (research_report.tables_schema, backlog_approval.tables_schema):
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema(world.schema)}" CASCADE'.encode())


def count(world: World, table: str, where: str = "TRUE", *params: Any) -> int:
    rows = world.sql(f"SELECT count(*) FROM {table} WHERE {where}", *params)
    return int(rows[0][0])


def killed(world: World, proc: Any) -> None:
    assert proc.wait(30) == -signal.SIGKILL, f"the worker should have died at its failpoint:\n{world.logs()}"


def how_resolved(client: Client, run_id: str, tool: str) -> str:
    """How the journaled result of ``tool`` came to be (empty if it ran with no gap)."""
    entries = client.journal(run_id)
    op = next(e.op_id for e in entries if e.kind == "intention" and e.data["tool"] == tool)
    return str(next(e.data.get("how", "") for e in entries if e.kind == "result" and e.op_id == op))


# -- research_report ------------------------------------------------------------------------


def published(world: World) -> int:
    return count(world, f"{research_report.tables_schema(world.schema)}.published")


def approve_publish(client: Client, run_id: str) -> dict[str, Any]:
    ask = pending_approval(client, run_id)
    assert ask["action"] == "publish" and set(ask["args"]) == {"key", "sha256", "destination"}
    client.approve(
        run_id, ask["op_id"], approver="editor", comment="Sources checked.", args_hash=ask["args_hash"]
    )
    return ask


def test_research_report_end_to_end(world: World, client: Client) -> None:
    world.worker(REPORT)
    run = client.enqueue("research_report", {"topic": "durable execution"})
    ask = approve_publish(client, run.id)
    done = client.wait(run.id, timeout=30)
    assert done.state == "succeeded", done.error
    key, sha = ask["args"]["key"], ask["args"]["sha256"]
    assert key == f"reports/{run.id}.md"
    schema = research_report.tables_schema(world.schema)
    assert world.sql(f"SELECT sha256 FROM {schema}.artifacts WHERE key = %s", key) == [(sha,)]
    assert world.sql(f"SELECT key, sha256 FROM {schema}.published") == [(key, sha)]
    assert done.result["published"] and done.result["sha256"] == sha
    assert how_resolved(client, run.id, "publish") == ""


@pytest.mark.parametrize(
    ("failpoint", "after_crash", "how"),
    [
        ("after_effect:publish", 1, "reconciler: executed"),  # published, answer lost
        ("after_intention:publish", 0, "reconciler: not executed"),  # intention, nothing sent
    ],
)
def test_research_report_crash_in_publish(
    world: World, client: Client, failpoint: str, after_crash: int, how: str
) -> None:
    first = world.worker(REPORT, OUTLAST_FAILPOINTS=failpoint)
    run = client.enqueue("research_report", {"topic": "durable execution"})
    approve_publish(client, run.id)
    killed(world, first)
    assert published(world) == after_crash
    assert not client.status(run.id).final
    world.worker(REPORT)
    done = client.wait(run.id, timeout=30)
    assert done.state == "succeeded", done.error
    assert published(world) == 1  # the reconciler asked by key and hash: published exactly once
    assert how_resolved(client, run.id, "publish") == how
    assert (
        done.result["publication"]
        == world.sql(f"SELECT id FROM {research_report.tables_schema(world.schema)}.published")[0][0]
    )


def test_research_report_unsure_lookup_waits_in_doubt(world: World, client: Client) -> None:
    first = world.worker(REPORT, OUTLAST_FAILPOINTS="after_effect:publish")
    run = client.enqueue("research_report", {"topic": "durable execution"})
    approve_publish(client, run.id)
    killed(world, first)
    world.worker(REPORT, REPORT_LOOKUP_DOWN="1")  # step 5: the service cannot tell
    wait_for(lambda: client.status(run.id).reason == "in_doubt", what="the publish to be in doubt")
    assert client.status(run.id).state == "waiting"
    assert published(world) == 1  # not published again on a guess
    op = next(e.op_id for e in client.journal(run.id) if e.kind == "in_doubt")
    pub_id, url = world.sql(f"SELECT id, url FROM {research_report.tables_schema(world.schema)}.published")[0]
    client.resolve(run.id, str(op), executed=True, result={"publication": pub_id, "url": url})
    done = client.wait(run.id, timeout=30)
    assert done.state == "succeeded" and done.result["publication"] == pub_id
    assert published(world) == 1


# -- backlog_approval -----------------------------------------------------------------------


def items(world: World) -> list[tuple[Any, ...]]:
    schema = backlog_approval.tables_schema(world.schema)
    return world.sql(f"SELECT item_id, operation_id FROM {schema}.approved_backlog_items")


def approval_status(world: World, operation_id: str) -> str:
    schema = backlog_approval.tables_schema(world.schema)
    rows = world.sql(f"SELECT status FROM {schema}.backlog_approvals WHERE operation_id = %s", operation_id)
    return str(rows[0][0])


def start_backlog(client: Client, **input: Any) -> tuple[str, dict[str, Any]]:
    run = client.enqueue("backlog_approval", {"draft": DRAFT, **input})
    ask = pending_approval(client, run.id)
    assert ask["action"] == "apply_backlog" and ask["args"]["draft"] == DRAFT
    return run.id, ask


def approve(client: Client, run_id: str, ask: dict[str, Any]) -> None:
    client.approve(run_id, ask["op_id"], args_hash=ask["args_hash"], **DECISION)


def finish(world: World, client: Client, run_id: str, ask: dict[str, Any]) -> dict[str, Any]:
    """Let a fresh worker end the run; exactly one row, for this operation, approval completed."""
    world.worker(BACKLOG)
    done = client.wait(run_id, timeout=30)
    assert done.state == "succeeded", f"{done.error}\n{world.logs()}"
    op = ask["args"]["operation_id"]
    assert items(world) == [(done.result["item_id"], op)]
    assert approval_status(world, op) == "completed"
    return dict(done.result)


def test_backlog_window_after_wait_published(world: World, client: Client) -> None:
    """Window 1: the wait is published, the worker dies: zero effect; a valid decision resumes."""
    first = world.worker(BACKLOG)
    run_id, ask = start_backlog(client)
    first.kill()
    first.wait(10)
    assert client.status(run_id).state == "awaiting_approval"
    assert items(world) == [] and approval_status(world, ask["args"]["operation_id"]) == "pending"
    for bad in ("", "   ", "x" * 501):  # a comment of 1 to 500 non-blank characters
        with pytest.raises(DecisionRefused, match="comment"):
            client.approve(run_id, ask["op_id"], approver="product", comment=bad, args_hash=ask["args_hash"])
    with pytest.raises(DecisionRefused, match="other arguments"):
        client.approve(run_id, ask["op_id"], approver="product", comment="ok", args_hash="0" * 64)
    approve(client, run_id, ask)  # decided while no worker runs: persisted, the run is woken
    finish(world, client, run_id, ask)


@pytest.mark.parametrize("failpoint", ["before_intention:apply_backlog", "after_intention:apply_backlog"])
def test_backlog_window_after_decision_before_effect(world: World, client: Client, failpoint: str) -> None:
    """Window 2: decided, the worker dies before the effect: the same decision sent again is
    accepted and changes nothing; a contradictory one is refused; the run completes, one row."""
    first = world.worker(BACKLOG, OUTLAST_FAILPOINTS=failpoint)
    run_id, ask = start_backlog(client)
    approve(client, run_id, ask)
    killed(world, first)
    assert items(world) == []
    before = client.approvals(run_id)
    approve(client, run_id, ask)
    assert client.approvals(run_id) == before
    with pytest.raises(DecisionRefused, match="already approved"):
        client.reject(run_id, ask["op_id"], args_hash=ask["args_hash"], **DECISION)
    finish(world, client, run_id, ask)


@pytest.mark.parametrize("how", ["crash", "raise"])
def test_backlog_window_inside_the_transaction(world: World, client: Client, how: str) -> None:
    """Window 3: interrupted inside the business transaction: the row and the completion are
    rolled back together; after the resume (crash) or the retry (raise), exactly one row."""
    first = world.worker(BACKLOG, BACKLOG_FAIL_IN_TRANSACTION=how)
    run_id, ask = start_backlog(client)
    approve(client, run_id, ask)
    if how == "crash":
        killed(world, first)
        assert items(world) == []
        assert approval_status(world, ask["args"]["operation_id"]) == "pending"
        finish(world, client, run_id, ask)
        assert how_resolved(client, run_id, "apply_backlog") == "idempotent: same key"
    else:
        done = client.wait(run_id, timeout=30)
        assert done.state == "succeeded", done.error
        # one row; its id is 2: the rolled-back insert took 1 (a sequence never goes back)
        assert items(world) == [(2, ask["args"]["operation_id"])] and done.result["item_id"] == 2
        assert "connection lost inside apply_backlog's transaction" in world.logs()


@pytest.mark.parametrize("failpoint", ["after_effect:apply_backlog", "after_result:apply_backlog"])
def test_backlog_window_after_commit(world: World, client: Client, failpoint: str) -> None:
    """Window 4: committed, the worker dies before the engine finished: completed and one row;
    the replay returns the SAME item id, and no second row."""
    first = world.worker(BACKLOG, OUTLAST_FAILPOINTS=failpoint)
    run_id, ask = start_backlog(client)
    approve(client, run_id, ask)
    killed(world, first)
    committed = items(world)
    assert len(committed) == 1 and approval_status(world, ask["args"]["operation_id"]) == "completed"
    assert not client.status(run_id).final
    assert finish(world, client, run_id, ask)["item_id"] == committed[0][0]


def test_backlog_rejected_fails_with_no_row(world: World, client: Client) -> None:
    world.worker(BACKLOG)
    run_id, ask = start_backlog(client)
    client.reject(run_id, ask["op_id"], args_hash=ask["args_hash"], **DECISION)
    done = client.wait(run_id, timeout=30)
    assert done.state == "failed" and done.error is not None
    assert done.error["type"] == "ApprovalRejected" and DECISION["comment"] in done.error["message"]
    assert items(world) == [] and approval_status(world, ask["args"]["operation_id"]) == "rejected"


def test_backlog_operation_id_is_bound_to_one_draft(world: World, client: Client) -> None:
    world.worker(BACKLOG)
    run_id, ask = start_backlog(client, operation_id="pilot-lyon")
    other = client.enqueue(
        "backlog_approval", {"draft": {**DRAFT, "region": "Nantes"}, "operation_id": "pilot-lyon"}
    )
    done = client.wait(other.id, timeout=30)
    assert done.state == "failed" and done.error is not None
    assert "bound to another draft" in done.error["message"]
    approve(client, run_id, ask)
    assert client.wait(run_id, timeout=30).state == "succeeded"
    assert items(world) == [(1, "pilot-lyon")]


# -- support_agent --------------------------------------------------------------------------


def test_support_agent_killed_after_a_model_response_refunds_once_after_its_approval(world: World) -> None:
    from examples import support_agent

    app = "examples.support_agent:app"
    shop = support_agent.tables_schema(world.schema)
    try:
        with Client(settings=world.settings()) as c:
            first = world.worker(app, OUTLAST_FAILPOINTS="after_result:support:model")
            run = c.enqueue("support", {"prompt": "Refund order A7, please."})
            killed(world, first)  # the first response journaled: a look-up of A7
            world.worker(app)
            ask = pending_approval(c, run.id)  # 80 is above 50: the refund waits for a person
            assert (ask["action"], ask["args"]) == ("support.refund", {"order_id": "A7", "amount": 80})
            c.approve(run.id, ask["op_id"], approver="support-lead", comment="ok", args_hash=ask["args_hash"])
            done = c.wait(run.id, timeout=60)
            assert done.state == "succeeded", done.error
            assert done.result == "Done. Refund: refunded 80 for A7; email: sent."
            assert world.sql(f"SELECT order_id, amount FROM {shop}.refunds") == [("A7", 80)]
            assert world.sql(f"SELECT to_address FROM {shop}.outbox") == [("ann@example.com",)]
            journal = c.journal(run.id)
            models = [e.op_id for e in journal if e.kind == "intention" and e.data["tool"] == "support:model"]
            answered = [e.op_id for e in journal if e.kind == "result" and e.op_id in models]
            assert len(models) == 4 and answered == models  # each response journaled once
    finally:
        world.stop_all()
        with psycopg.connect(world.database_url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{shop}" CASCADE'.encode())


def test_support_agent_streams_its_answers_and_waits_for_the_customer_s_reply(world: World) -> None:
    from examples import support_agent

    shop = support_agent.tables_schema(world.schema)
    try:
        with Client(settings=world.settings()) as c:
            world.worker("examples.support_agent:app")
            run = c.enqueue("support", {"prompt": "Refund order A7, please.", "replies": 1})
            ask = pending_approval(c, run.id)
            c.approve(run.id, ask["op_id"], approver="support-lead", comment="ok", args_hash=ask["args_hash"])
            waiting = wait_for(lambda: c.status(run.id).reason == "message", what="the reply awaited")
            assert waiting and c.status(run.id).lease_expires_at is None  # no worker held
            c.send(run.id, "customer", "Thanks!")
            items = list(c.stream(run.id))  # the answers as they were written, then the run
            done = items[-1]
            assert isinstance(done, RunRecord) and done.state == "succeeded", done
            thanks = "Thank you for your reply (Thanks!). Anything else, just write."
            assert done.result == thanks
            live = "".join(item.data for item in items[:-1])
            assert live == "Done. Refund: refunded 80 for A7; email: sent." + thanks
            assert len(items) > 3  # word by word, not whole
    finally:
        world.stop_all()
        with psycopg.connect(world.database_url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{shop}" CASCADE'.encode())
