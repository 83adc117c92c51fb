"""A LangGraph chat graph run by a workflow (DurableGraph) under a real crash: a worker process
killed right after the chat model's first response is journaled as its node's result, or in the
middle of a reconciled tool of its ``ToolNode``, then an unarmed worker resumes the run. Counted in
the world (tests/apps/graph_chat.py): each call of langchain-core's fake chat model with its turn,
each tool's runs, each reconciler's, and the bank's refunds."""

from __future__ import annotations

from typing import Any

import pytest

from outlast import Client
from tests.apps import graph_chat
from tests.conftest import World
from tests.crash import killed

pytestmark = pytest.mark.crash

APP = "tests.apps.graph_chat:app"
ANSWER = "lookup=A1: 30 EUR; refund=refunded 30"


def resumed(world: World, **armed: str) -> tuple[Any, str]:
    """The run's end after a worker armed with ``armed`` was killed, and the run's id."""
    graph_chat.setup(world.database_url, world.schema)
    with Client(settings=world.settings()) as c:
        run_id = c.enqueue("chat", {"prompt": "refund A1"}).id
        killed(world.worker(APP, **armed))
        world.worker(APP)
        return c.wait(run_id, timeout=90), run_id


def turns(world: World, run_id: str) -> list[int]:
    return [t for (t,) in world.sql("SELECT turn FROM model_calls WHERE run_id = %s ORDER BY id", run_id)]


def runs_of(world: World, run_id: str, tool: str) -> int:
    found = world.sql("SELECT count(*) FROM effects WHERE run_id = %s AND tool = %s", run_id, tool)
    return int(found[0][0])


def test_killed_after_a_model_response_is_journaled_the_model_is_not_asked_again(world: World) -> None:
    run, run_id = resumed(world, OUTLAST_FAILPOINTS="after_result:chat.agent")
    assert run.state == "succeeded", run.reason
    assert run.result == {"answer": ANSWER, "in_doubt": False}
    # killed with the first response journaled: on the resume it is served from the journal, the
    # model asked once per turn in all
    assert turns(world, run_id) == [0, 1, 2]
    assert (runs_of(world, run_id, "lookup"), runs_of(world, run_id, "refund")) == (1, 1)
    assert world.sql("SELECT order_id, amount FROM refunds") == [("A1", 30)]


def test_a_reconciled_tool_killed_after_its_effect_is_reconciled_and_happens_once(world: World) -> None:
    run, run_id = resumed(world, CHAT_DIE_IN="refund")
    assert run.state == "succeeded", run.reason
    # the reconciler found the refund: its answer is the call's result, given to the model
    assert run.result == {"answer": ANSWER, "in_doubt": False}
    assert runs_of(world, run_id, "refund") == 1  # cut after its effect, never run again
    assert world.sql("SELECT order_id, amount FROM refunds") == [("A1", 30)]
    assert world.sql("SELECT found FROM reconciled") == [(True,)]
    assert turns(world, run_id) == [0, 1, 2]  # the journaled turns not asked again


def test_a_reconciled_tool_killed_before_its_effect_is_run_once_on_the_takeover(world: World) -> None:
    run, run_id = resumed(world, OUTLAST_FAILPOINTS="after_intention:chat.refund")
    assert run.state == "succeeded", run.reason
    assert run.result == {"answer": ANSWER, "in_doubt": False}
    # the reconciler found no refund (not executed): the call was made once, by the takeover
    assert world.sql("SELECT found FROM reconciled") == [(False,)]
    assert runs_of(world, run_id, "refund") == 1
    assert world.sql("SELECT order_id, amount FROM refunds") == [("A1", 30)]
