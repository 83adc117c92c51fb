"""An OpenAI Agents SDK agent run (DurableAgent) under real crashes: a worker process killed after a
model response is journaled, and after a tool's effect before its result is journaled; then an
unarmed worker resumes it. Counted in the world (tests/apps/oai_shop.py): the calls the scripted
``Model`` answered, each tool's runs and the refunds the bank made."""

from __future__ import annotations

import random
import signal
import time
from typing import Any

import pytest

from outlast import Client
from tests.apps import oai_shop
from tests.conftest import World, wait_for
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


def killed_mid_email(world: World, workflow: str, app: str) -> tuple[Client, str, Any, float]:
    """Run the shop's agent on a worker whose email hangs mid-call (``OAI_SHOP_HANG``), SIGKILL
    that worker at a random moment of the call (the outbox sends 0.3 s into it), then resume the
    run on a worker whose email does not hang; return the client, the run's id, its end and how
    far into the call the kill came."""
    oai_shop.setup(world.database_url, world.schema)
    c = Client(settings=world.settings())
    run_id = c.enqueue(workflow, {"prompt": "refund order A1"}).id
    first = world.worker(app, OAI_SHOP_HANG="1")
    wait_for(lambda: runs(world, run_id).get("email_started"), 60, 0.02, "the email to start")
    delay = random.uniform(0.0, 0.6)
    time.sleep(delay)
    first.send_signal(signal.SIGKILL)
    assert first.wait(10) == -signal.SIGKILL
    world.worker(app)
    return c, run_id, c.wait(run_id, timeout=90), delay


def test_a_reconciled_tool_killed_mid_call_takes_effect_exactly_once(world: World) -> None:
    """Killed before the outbox sent, or after: on takeover the reconciler asks the outbox, and
    the email is sent again only if it was not; one email in the world either way."""
    c, run_id, run, delay = killed_mid_email(world, "oai_shop_hanging", "tests.apps.oai_shop:hanging_app")
    with c:
        assert run.state == "succeeded", run.reason
        assert run.result == {"output": ANSWER, "in_doubt": False}
        sent = runs(world, run_id)
        assert sent["email_customer"] == 1, (delay, sent)  # exactly once in the world
        resolved = [e["how"] for e in world.logged("gap.resolved") if e.get("run_id") == run_id]
        assert resolved in (["reconciler: executed"], ["reconciler: not executed"]), (delay, resolved)
        assert world.sql("SELECT order_id, amount FROM refunds") == [("A1", 30)]


def test_a_plain_tool_killed_mid_call_is_in_doubt_and_not_run_again(world: World) -> None:
    """Killed before or after the outbox sent: the call is in doubt, never run again (no
    reconciler to ask), so at most one email; the run says so and the model is told."""
    c, run_id, run, delay = killed_mid_email(
        world, "oai_shop_hanging_plain", "tests.apps.oai_shop:hanging_plain_app"
    )
    with c:
        assert run.state == "succeeded", run.reason
        assert run.result["in_doubt"] is True
        assert "outcome of this email_customer call is unknown" in run.result["output"]
        sent = runs(world, run_id)
        assert sent.get("email_customer", 0) in (0, 1), (delay, sent)
        assert sent["email_started"] == 1  # never run twice
        assert model_calls(world, run_id) == [1, 2, 3]
