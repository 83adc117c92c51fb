"""An agent run (outlast.agents) under real crashes: a worker process killed after a model response
is journaled, in the middle of a tool, and after a tool's effect before its result is journaled;
then an unarmed worker resumes it. Counted in the world (tests/apps/agent_shop.py): the calls the
scripted ``FunctionModel`` answered, each tool's dispatches and the refunds the bank made."""

from __future__ import annotations

from typing import Any

import pytest

from outlast import Client
from tests.apps import agent_shop
from tests.conftest import World
from tests.crash import killed

pytestmark = pytest.mark.crash

APP = "tests.apps.agent_shop:app"
PLAIN = "tests.apps.agent_shop:plain_app"
ANSWER = 'done: lookup_order={"amount":30,"order_id":"A1"}; refund=refunded 30; email_customer=sent'


def resumed(world: World, workflow: str, app: str, **armed: str) -> tuple[Client, str, Any]:
    """Run the shop's agent on a worker armed with ``armed`` (killed there), then on an unarmed
    one; return the client, the run's id and its end."""
    agent_shop.setup(world.database_url, world.schema)
    c = Client(settings=world.settings())
    run_id = c.enqueue(workflow, {"prompt": "refund order A1"}).id
    killed(world.worker(app, **armed))
    world.worker(app)
    return c, run_id, c.wait(run_id, timeout=90)


def model_calls(world: World, run_id: str) -> list[int]:
    return [s for (s,) in world.sql("SELECT step FROM model_calls WHERE run_id = %s ORDER BY id", run_id)]


def dispatches(world: World, run_id: str) -> dict[str, int]:
    rows = world.sql("SELECT tool, count(*) FROM effects WHERE run_id = %s GROUP BY tool", run_id)
    return {tool: n for tool, n in rows}


def journaled_responses(c: Client, run_id: str) -> int:
    return sum(
        e.data["kind"] == "result" and e.data.get("op") in _model_ops(c, run_id) for e in c.journal(run_id)
    )


def _model_ops(c: Client, run_id: str) -> set[str]:
    return {e.data["op"] for e in c.journal(run_id) if e.data.get("tool", "").endswith(":model")}


def test_killed_after_a_model_response_is_journaled_the_model_is_not_asked_again(world: World) -> None:
    c, run_id, run = resumed(world, "shop", APP, OUTLAST_FAILPOINTS="after_result:shop:model")
    with c:
        assert run.state == "succeeded", run.reason
        assert run.result["output"] == ANSWER
        # Exactly one model call per journaled response: the one journaled before the kill was
        # replayed, not sent again.
        assert model_calls(world, run_id) == [1, 2, 3]
        assert journaled_responses(c, run_id) == 3
        assert dispatches(world, run_id) == {"lookup_order": 1, "refund": 1, "email_customer": 1}
        assert world.sql("SELECT order_id, amount FROM refunds") == [("A1", 30)]


def test_killed_in_the_middle_of_an_idempotent_tool_it_is_sent_again_with_its_key(world: World) -> None:
    c, run_id, run = resumed(world, "shop", APP, SHOP_DIE_IN="refund")
    with c:
        assert run.state == "succeeded", run.reason
        assert run.result["output"] == ANSWER
        assert model_calls(world, run_id) == [1, 2, 3]
        # The refund was dispatched again with the same idempotency key: one refund in the bank.
        assert dispatches(world, run_id)["refund"] == 2
        assert world.sql("SELECT order_id, amount FROM refunds") == [("A1", 30)]
        # The email, a parallel call of the same response, went out once (reconciled if it was cut).
        assert dispatches(world, run_id)["email_customer"] == 1


def test_killed_after_a_reconciled_tool_s_effect_it_is_reconciled_not_sent_again(world: World) -> None:
    c, run_id, run = resumed(world, "shop", APP, OUTLAST_FAILPOINTS="after_effect:shop.email_customer")
    with c:
        assert run.state == "succeeded", run.reason
        assert run.result["output"] == ANSWER
        assert model_calls(world, run_id) == [1, 2, 3]
        # The email's reconciler found it sent: not sent again. The refund, a parallel call of the
        # same response, may have been cut too: sent again with its key, one refund in the bank.
        sent = dispatches(world, run_id)
        assert (sent["lookup_order"], sent["email_customer"]) == (1, 1)
        assert world.sql("SELECT order_id, amount FROM refunds") == [("A1", 30)]
        how = [e.data.get("how") for e in c.journal(run_id) if e.data["kind"] == "result"]
        assert "reconciler: executed" in how


def test_killed_after_a_plain_tool_s_effect_it_is_in_doubt_never_run_twice(world: World) -> None:
    c, run_id, run = resumed(
        world, "shop_plain", PLAIN, OUTLAST_FAILPOINTS="after_effect:shop_plain.email_customer"
    )
    with c:
        assert run.state == "succeeded", run.reason
        assert run.result["in_doubt"] is True
        assert "outcome of this email_customer call is unknown" in run.result["output"]
        assert model_calls(world, run_id) == [1, 2, 3]
        sent = dispatches(world, run_id)
        assert (sent["lookup_order"], sent["email_customer"]) == (1, 1)  # never run twice
        assert world.sql("SELECT order_id, amount FROM refunds") == [("A1", 30)]


def test_killed_after_the_response_to_an_admitted_message_it_is_served_from_the_journal(world: World) -> None:
    agent_shop.setup(world.database_url, world.schema)
    admitting = "tests.apps.agent_shop:admitting_app"
    with Client(settings=world.settings()) as c:
        run_id = c.enqueue("shop_admitting", {"prompt": "refund order A1"}).id
        c.send(run_id, "customer", agent_shop.CUSTOMER_SAYS)  # kept: admitted at the first request
        killed(world.worker(admitting, OUTLAST_FAILPOINTS="after_result:shop_admitting:model"))
        world.worker(admitting)
        run = c.wait(run_id, timeout=90)
        assert run.state == "succeeded", run.reason
        assert model_calls(world, run_id) == [
            1,
            2,
            3,
        ]  # the response journaled before the kill: not asked again
        # Every request carried the message once: after the resume, served from the journal (the
        # inbox is empty), not taken again, not lost.
        saw = world.sql("SELECT step, times FROM model_saw WHERE run_id = %s ORDER BY id", run_id)
        assert saw == [(1, 1), (2, 1), (3, 1)]
        taken = [e for e in c.journal(run_id) if e.data["kind"] == "message" and not e.data.get("timeout")]
        assert [e.data["payload"] for e in taken] == [agent_shop.CUSTOMER_SAYS]
