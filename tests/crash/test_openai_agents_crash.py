"""An OpenAI Agents SDK agent run (DurableAgent) under real crashes: a worker process killed after a
model response is journaled, and after a tool's effect before its result is journaled; then an
unarmed worker resumes it. Counted in the world (tests/apps/oai_shop.py): the calls the scripted
``Model`` answered, each tool's runs and the refunds the bank made."""

from __future__ import annotations

from typing import Any

import pytest

from outlast import Client
from tests.apps import oai_shop
from tests.conftest import World
from tests.crash import killed

pytestmark = pytest.mark.crash

APP = "tests.apps.oai_shop:app"
PLAIN = "tests.apps.oai_shop:plain_app"
ANSWER = "done: email_customer=sent; lookup_order={'amount': 30, 'order_id': 'A1'}; refund=refunded 30"


def resumed(world: World, workflow: str, app: str, **armed: str) -> tuple[Client, str, Any]:
    """Run the shop's agent on a worker armed with ``armed`` (killed there), then on an unarmed
    one; return the client, the run's id and its end."""
    oai_shop.setup(world.database_url, world.schema)
    c = Client(settings=world.settings())
    run_id = c.enqueue(workflow, {"prompt": "refund order A1"}).id
    killed(world.worker(app, **armed))
    world.worker(app)
    return c, run_id, c.wait(run_id, timeout=90)


def model_calls(world: World, run_id: str) -> list[int]:
    return [s for (s,) in world.sql("SELECT step FROM model_calls WHERE run_id = %s ORDER BY id", run_id)]


def runs(world: World, run_id: str) -> dict[str, int]:
    rows = world.sql("SELECT tool, count(*) FROM effects WHERE run_id = %s GROUP BY tool", run_id)
    return {tool: n for tool, n in rows}


def test_killed_after_a_model_response_is_journaled_the_model_is_not_asked_again(world: World) -> None:
    c, run_id, run = resumed(world, "oai_shop", APP, OUTLAST_FAILPOINTS="after_result:oai_shop:model")
    with c:
        assert run.state == "succeeded", run.reason
        assert run.result == {"output": ANSWER, "in_doubt": False}
        assert model_calls(world, run_id) == [1, 2, 3]  # the journaled response replayed, not asked again
        assert runs(world, run_id) == {"lookup_order": 1, "refund": 1, "email_customer": 1}
        assert world.sql("SELECT order_id, amount FROM refunds") == [("A1", 30)]


def test_killed_after_an_idempotent_tool_s_effect_it_is_sent_again_with_its_key(world: World) -> None:
    c, run_id, run = resumed(world, "oai_shop", APP, OUTLAST_FAILPOINTS="after_effect:oai_shop.refund")
    with c:
        assert run.state == "succeeded", run.reason
        assert run.result == {"output": ANSWER, "in_doubt": False}
        assert model_calls(world, run_id) == [1, 2, 3]
        sent = runs(world, run_id)
        assert sent["lookup_order"] == 1  # a read journaled before the kill: replayed
        # the refund's result was lost with its worker: sent again with the same key, one refund
        assert sent["refund"] == 2
        assert world.sql("SELECT order_id, amount FROM refunds") == [("A1", 30)]
        assert sent["email_customer"] == 1  # the other call of the response: reconciled if it was cut


def test_killed_after_a_reconciled_tool_s_effect_it_is_reconciled_not_sent_again(world: World) -> None:
    c, run_id, run = resumed(
        world, "oai_shop", APP, OUTLAST_FAILPOINTS="after_effect:oai_shop.email_customer"
    )
    with c:
        assert run.state == "succeeded", run.reason
        assert run.result == {"output": ANSWER, "in_doubt": False}
        assert model_calls(world, run_id) == [1, 2, 3]
        sent = runs(world, run_id)
        assert (sent["lookup_order"], sent["email_customer"]) == (1, 1)
        assert world.sql("SELECT order_id, amount FROM refunds") == [("A1", 30)]
        how = [e.data.get("how") for e in c.journal(run_id) if e.data["kind"] == "result"]
        assert "reconciler: executed" in how


def test_killed_after_a_plain_tool_s_effect_it_is_in_doubt_never_run_twice(world: World) -> None:
    c, run_id, run = resumed(
        world, "oai_shop_plain", PLAIN, OUTLAST_FAILPOINTS="after_effect:oai_shop_plain.email_customer"
    )
    with c:
        assert run.state == "succeeded", run.reason
        assert run.result["in_doubt"] is True
        assert "outcome of this email_customer call is unknown" in run.result["output"]
        assert model_calls(world, run_id) == [1, 2, 3]
        sent = runs(world, run_id)
        assert (sent["lookup_order"], sent["email_customer"]) == (1, 1)  # never run twice
        assert world.sql("SELECT order_id, amount FROM refunds") == [("A1", 30)]


def test_a_streamed_run_killed_after_a_model_response_is_journaled_is_not_asked_again(world: World) -> None:
    c, run_id, run = resumed(
        world,
        "oai_shop_streamed",
        "tests.apps.oai_shop:streamed_app",
        OUTLAST_FAILPOINTS="after_result:oai_shop_streamed:model",
    )
    with c:
        assert run.state == "succeeded", run.reason
        assert run.result == {"output": ANSWER, "in_doubt": False}
        assert model_calls(world, run_id) == [1, 2, 3]  # the streamed response replayed, not asked again
        assert runs(world, run_id) == {"lookup_order": 1, "refund": 1, "email_customer": 1}
