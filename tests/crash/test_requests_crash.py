"""Typed requests under real failures: worker processes killed with SIGKILL in each window of a
request's life, as a durable business approval lives it (a draft bound to its operation id, the
decision answered from outside, then the approved item written with the draft completed in one
transaction). Assertions are on the world (tests/apps/asking.py: ``items``, ``drafts``,
``applied``), the ``requests`` row and the journal:

- after the wait is published: waiting, no effect; answered later, one item;
- a request answered while its run is taken over (the answer journaled, the worker killed before
  the effect): the same answer sent again is accepted, a different one refused, and the next
  worker acts on the first, once;
- during the effect's transaction: the item and the draft's completion are undone together, and
  the effect is made once by the next worker;
- after the effect's commit, before its result is journaled: the same item, one row.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from outlast import AnswerRefused, Client
from outlast._model import RunRecord
from tests.apps import asking
from tests.conftest import World, wait_for
from tests.crash import killed

pytestmark = pytest.mark.crash

APP = "tests.apps.asking:app"
YES = {"operation_id": "op-42", "choice": "approve", "comment": "External business decision."}


@contextmanager
def asking_world(world: World) -> Iterator[Client]:
    asking.setup(world.database_url, world.schema)
    client = Client(settings=world.settings())
    try:
        yield client
    finally:
        client.close()


def reach(c: Client, run_id: str, *states: str, timeout: float = 30.0) -> RunRecord:
    def look() -> RunRecord | None:
        run = c.status(run_id)
        return run if run.state in states else None

    found: RunRecord = wait_for(look, timeout, 0.1, f"run {run_id} to be {' or '.join(states)}")
    return found


def world_of(world: World) -> dict[str, Any]:
    """The business state: items (operation, comment), drafts' status, dispatches of apply."""
    return {
        "items": world.sql("SELECT id, operation_id, comment FROM items ORDER BY id"),
        "drafts": world.sql("SELECT operation_id, status FROM drafts ORDER BY operation_id"),
        "applied": world.sql("SELECT count(*) FROM applied")[0][0],
    }


def kinds(world: World, run_id: str) -> list[tuple[str, str]]:
    rows = world.sql("SELECT kind, op_id FROM journal WHERE run_id = %s ORDER BY seq", run_id)
    return [(k, op) for k, op in rows]


def responses(world: World, run_id: str) -> list[dict[str, Any]]:
    rows = world.sql("SELECT body FROM journal WHERE run_id = %s AND kind = 'response' ORDER BY seq", run_id)
    return [json.loads(body) for (body,) in rows]


def start(c: Client, world: World) -> str:
    return c.enqueue(
        "backlog", {"operation_id": "op-42", "draft": "regional pilot", "responders": ["ops"]}
    ).id


def test_killed_after_the_wait_is_published(world: World) -> None:
    with asking_world(world) as c:
        rid = start(c, world)
        killed(world.worker(APP, OUTLAST_FAILPOINTS="after_fenced_write:wait"))
        run = c.status(rid)
        assert (run.state, run.reason, run.owner) == ("waiting", "request", None)
        assert world_of(world) == {"items": [], "drafts": [("op-42", "waiting")], "applied": 0}
        assert [r["id"] for r in c.requests(rid)] == ["op-2"]
        assert not c.respond(rid, "op-2", YES, by="ops").again
        world.worker(APP)
        done = reach(c, rid, "succeeded", "failed")
        assert done.state == "succeeded", done.reason
        shown = world_of(world)
        assert [(op, comment) for _, op, comment in shown["items"]] == [("op-42", YES["comment"])]
        assert (shown["drafts"], shown["applied"]) == ([("op-42", "completed")], 1)
        assert done.result is not None and done.result["item"] == shown["items"][0][0]


def test_a_request_answered_while_its_run_is_taken_over(world: World) -> None:
    with asking_world(world) as c:
        rid = start(c, world)
        first = world.worker(APP, OUTLAST_FAILPOINTS="before_intention:apply")
        reach(c, rid, "waiting")
        c.respond(rid, "op-2", YES, by="ops")
        killed(first)  # it took the run, journaled the answer, and died before the effect
        run = c.status(rid)
        assert run.state == "running" and run.owner is not None  # held by a dead worker
        assert ("response", "op-2") in kinds(world, rid)
        # While the run is taken over: the same answer is accepted, a different one refused.
        assert c.respond(rid, "op-2", dict(YES), by="ops").again
        other = {**YES, "choice": "reject", "comment": "changed my mind"}
        with pytest.raises(AnswerRefused, match=f"run '{rid}', request op-2: already answered by ops"):
            c.respond(rid, "op-2", other, by="ops")
        assert world.sql("SELECT answer FROM requests WHERE run_id = %s", rid) == [(YES,)]
        assert world_of(world)["items"] == []

        world.worker(APP)
        done = reach(c, rid, "succeeded", "failed")
        assert done.state == "succeeded", done.reason
        assert done.fencing_token == run.fencing_token + 1  # one takeover
        shown = world_of(world)
        assert [(op, comment) for _, op, comment in shown["items"]] == [("op-42", YES["comment"])]
        assert shown["applied"] == 1  # the effect once
        assert [r["value"] for r in responses(world, rid)] == [YES]  # journaled once, the first


def test_killed_inside_the_effects_transaction(world: World) -> None:
    with asking_world(world) as c:
        rid = start(c, world)
        dying = world.worker(APP, ASKING_DIE_IN_APPLY="1")
        reach(c, rid, "waiting")
        c.respond(rid, "op-2", YES, by="ops")
        killed(dying)
        # The insert and the completion were undone together.
        assert world_of(world) == {"items": [], "drafts": [("op-42", "waiting")], "applied": 1}
        world.worker(APP)
        done = reach(c, rid, "succeeded", "failed")
        assert done.state == "succeeded", done.reason
        shown = world_of(world)
        assert len(shown["items"]) == 1 and shown["drafts"] == [("op-42", "completed")]
        assert shown["applied"] == 2  # dispatched again: the first never committed


def test_killed_after_the_effects_commit(world: World) -> None:
    with asking_world(world) as c:
        rid = start(c, world)
        w = world.worker(APP, OUTLAST_FAILPOINTS="after_effect:apply")
        reach(c, rid, "waiting")
        c.respond(rid, "op-2", YES, by="ops")
        killed(w)
        before = world_of(world)
        assert len(before["items"]) == 1 and before["drafts"] == [("op-42", "completed")]
        world.worker(APP)
        done = reach(c, rid, "succeeded", "failed")
        assert done.state == "succeeded", done.reason
        after = world_of(world)
        assert after["items"] == before["items"]  # the same item, one row
        assert done.result is not None and done.result["item"] == before["items"][0][0]
        time.sleep(0.2)
        assert c.respond(rid, "op-2", YES, by="ops").again
