"""outlast.testing on real Postgres and Redis, with the example shop (tests/apps/shop.py): a replaced
tool, a day-long durable sleep fired at once, an approval that expires, a deadline that passes, a
crash after the charge (in-process, then in a real worker process) resumed through the
reconciler, and teardown. Charges are counted in the ledger (a table of the test's schema), not
only in the journal."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import redis

from outlast import NOT_EXECUTED, App
from outlast.testing import Harness, HarnessFactory, outlast_harness, outlast_servers
from tests.apps import shop

__all__ = ["outlast_harness", "outlast_servers"]  # the fixtures, without the plugin installed

DAY = 24 * 3600


@pytest.fixture
def make_shop(outlast_harness: HarnessFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A harness for the shop with its ledger; in-process tools find it through the env."""

    def make(**settings: Any) -> Harness:
        h = outlast_harness(shop.app, **settings)
        shop.setup(h.database_url, h.schema)
        monkeypatch.setenv("OUTLAST_DATABASE_URL", h.database_url)
        monkeypatch.setenv("OUTLAST_SCHEMA", h.schema)
        return h

    yield make


def charges(h: Harness, run_id: str) -> list[int]:
    return [amount for (amount,) in h.sql("SELECT amount FROM charges WHERE run_id = %s ORDER BY id", run_id)]


def shipped_by(sent: list[str]) -> Any:
    def fake_ship(item: str) -> str:
        sent.append(item)
        return f"TRACK-{item}"

    return fake_ship


def test_a_day_long_sleep_fires_at_once_with_a_replaced_tool(make_shop: Any) -> None:
    h = make_shop()
    sent: list[str] = []
    h.replace_tool("ship", shipped_by(sent))
    h.start_worker()
    run = h.client.enqueue("order", {"item": "book", "amount": 30})
    waiting = h.wait(run.id, "waiting")
    assert waiting.reason == "timer"

    assert h.advance(3600) == [run.id]  # an hour of the day: not due yet
    time.sleep(1.0)  # several sweeps
    assert h.client.status(run.id).state == "waiting"

    started = time.monotonic()
    h.advance(DAY - 3600)
    done = h.wait(run.id, timeout=10)
    assert time.monotonic() - started < 5
    assert done.state == "succeeded", done
    assert done.result["tracking"] == "TRACK-book"
    assert sent == ["book"]
    assert charges(h, run.id) == [30]
    assert h.client.verify(run.id) is None  # the chain verifies
    kinds = [(e["kind"], e["op"]) for e in h.journal(run.id)]
    assert kinds == [
        ("intention", "op-1"),
        ("result", "op-1"),
        ("timer", "op-2"),
        ("intention", "op-3"),
        ("result", "op-3"),
    ]
    assert [e["detail"]["seconds"] for e in h.events(run.id) if e["kind"] == "advanced"] == [3600, DAY - 3600]


def test_an_approval_expires_on_advance(make_shop: Any) -> None:
    h = make_shop()
    h.start_worker()
    run = h.client.enqueue("refund", {"order_id": "A7", "amount": 30})
    h.wait(run.id, "awaiting_approval")
    [request] = h.client.approvals(run.id)
    assert request["status"] == "pending"

    h.advance(3600)
    done = h.wait(run.id, timeout=10)
    assert done.state == "timed_out", done
    assert "expired" in (done.reason or "")
    assert [(e["kind"], e.get("status")) for e in h.journal(run.id)] == [
        ("approval", None),
        ("decision", "expired"),
    ]
    assert charges(h, run.id) == []  # nothing refunded


def test_a_deadline_passes_on_advance(make_shop: Any) -> None:
    h = make_shop()
    h.start_worker()
    run = h.client.enqueue("order", {"item": "book", "amount": 30}, deadline=2 * 3600)
    h.wait(run.id, "waiting")
    h.advance(3 * 3600)
    done = h.wait(run.id, timeout=10)
    assert done.state == "timed_out", done
    assert charges(h, run.id) == [30]


def test_crash_after_the_charge_in_process_then_the_reconciler_says_charged(make_shop: Any) -> None:
    h = make_shop(lease_ttl=1)
    sent: list[str] = []
    h.replace_tool("ship", shipped_by(sent))
    run = h.client.enqueue("order", {"item": "book", "amount": 30})

    h.crash_at("after_effect", tool="charge")  # charged; its result not journaled
    assert charges(h, run.id) == [30]
    assert [(e["kind"], e["op"]) for e in h.journal(run.id)] == [("intention", "op-1")]
    crashed = h.client.status(run.id)
    assert crashed.state == "running" and crashed.owner is not None  # the lease is left to expire

    h.start_worker()
    h.wait(run.id, "waiting", timeout=20)
    [intention, result, _timer] = h.journal(run.id)
    assert result["op"] == "op-1" and result["how"] == "reconciler: executed"
    assert result["ok"] == {"charged": 30, "key": intention["key"]}
    h.advance(DAY)
    done = h.wait(run.id, timeout=10)
    assert done.state == "succeeded", done
    assert done.fencing_token > intention["token"]  # taken over, not continued
    assert charges(h, run.id) == [30]  # charged once
    assert sent == ["book"]


@pytest.mark.parametrize(
    ("point", "tool"),
    [
        ("before_intention", "charge"),
        ("after_intention", "charge"),
        ("after_effect", "charge"),
        ("after_result", "charge"),
        ("before_ack", None),
    ],
)
def test_a_crash_at_each_point_charges_once(make_shop: Any, point: str, tool: str | None) -> None:
    h = make_shop(lease_ttl=1)
    h.replace_tool("ship", shipped_by([]))
    run = h.client.enqueue("order", {"item": "book", "amount": 30})
    h.crash_at(point, tool=tool)
    h.start_worker()
    h.wait(run.id, "waiting", timeout=20)
    h.advance(DAY)
    assert h.wait(run.id, timeout=10).state == "succeeded"
    assert charges(h, run.id) == [30]


def test_kill_at_kills_a_real_worker_process_and_an_in_process_one_resumes(make_shop: Any) -> None:
    h = make_shop(lease_ttl=1)
    sent: list[str] = []
    run = h.client.enqueue("order", {"item": "book", "amount": 30})

    h.kill_at("after_effect", tool="charge")  # SIGKILL, in tests.apps.shop:app's own process
    assert charges(h, run.id) == [30]
    assert [e["kind"] for e in h.journal(run.id)] == ["intention"]

    h.replace_tool("ship", shipped_by(sent))
    h.start_worker()
    h.wait(run.id, "waiting", timeout=20)
    assert h.journal(run.id)[1]["how"] == "reconciler: executed"
    h.advance(DAY)
    assert h.wait(run.id, timeout=10).state == "succeeded"
    assert charges(h, run.id) == [30]
    assert sent == ["book"]


def test_without_a_reconciler_the_crash_leaves_the_charge_in_doubt(make_shop: Any) -> None:
    h = make_shop(lease_ttl=1)
    del_reconciler = h.replace_reconciler("charge", lambda args, action: 1 / 0)  # it cannot look
    run = h.client.enqueue("order", {"item": "book", "amount": 30})
    h.crash_at("after_effect", tool="charge")
    h.start_worker()
    waiting = h.wait(run.id, "waiting", timeout=20)
    assert waiting.reason == "in_doubt"
    assert [e["kind"] for e in h.journal(run.id)] == ["intention", "in_doubt"]
    del_reconciler.restore()
    assert shop.app.reconcilers["charge"] is shop.charge_made


async def test_works_inside_an_async_test(make_shop: Any) -> None:
    h = make_shop()
    with h.replace_tool("ship", shipped_by([])):
        h.start_worker()
        run = h.client.enqueue("order", {"item": "pen", "amount": 2})
        h.wait(run.id, "waiting")
        h.advance(DAY)
        assert h.wait(run.id).result["tracking"] == "TRACK-pen"
    assert shop.app.tools["ship"].fn is shop.ship


def test_close_stops_the_worker_puts_tools_back_and_drops_schema_and_keys(make_shop: Any) -> None:
    h = make_shop()
    h.replace_tool("ship", shipped_by([]))
    h.start_worker()
    run = h.client.enqueue("order", {"item": "book", "amount": 30})
    h.wait(run.id, "waiting")
    r = redis.Redis.from_url(h.redis_url)
    assert list(r.scan_iter(f"{h.prefix}:*"))

    h.close()
    h.close()  # and again, as the fixture does
    assert shop.app.tools["ship"].fn is shop.ship
    assert list(r.scan_iter(f"{h.prefix}:*")) == []
    r.close()
    with psycopg.connect(h.database_url) as c:
        found = c.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (h.schema,)).fetchall()
    assert found == []


def test_refusals_name_the_way_out(make_shop: Any) -> None:
    h = make_shop()
    with pytest.raises(ValueError, match="known: after_effect"):
        h.crash_at("after_lunch")
    with pytest.raises(ValueError, match="positive, finite"):
        h.advance(float("nan"))
    with pytest.raises(KeyError, match="no reconciler"):
        h.replace_reconciler("ship", lambda args, action: None)
    run = h.client.enqueue("order", {"item": "book", "amount": 30})
    with pytest.raises(AssertionError, match=f"run {run.id} is queued after 0.2s, not succeeded"):
        h.wait(run.id, "succeeded", timeout=0.2)


# -- the README's example, as written there ---------------------------------------------------------

readme_app = App()


@readme_app.tool("charge")
def readme_charge(amount: int) -> dict[str, Any]:
    raise ConnectionError("no bank from tests")


@readme_app.reconciler("charge")
def readme_charge_made(args: dict[str, Any], action: Any) -> Any:
    raise ConnectionError("no bank from tests")


@readme_app.tool("ship")
def readme_ship(item: str) -> str:
    raise ConnectionError("no courier from tests")


@readme_app.workflow("order")
async def readme_order(run: Any, item: str, amount: int) -> dict[str, Any]:
    receipt = await run.call("charge", amount=amount)
    await run.sleep(24 * 3600)
    return {"receipt": receipt, "tracking": await run.call("ship", item=item)}


def test_an_order_survives_a_crash_after_the_charge(outlast_harness: HarnessFactory) -> None:
    app = readme_app

    # -- from here, the README's text --
    h = outlast_harness(app, lease_ttl=1)  # a private schema and key prefix, dropped after the test
    charged = []

    def fake_charge(amount: int) -> dict[str, int]:
        charged.append(amount)
        return {"charged": amount}

    h.replace_tool("charge", fake_charge)  # until the test ends (or: with h.replace_tool(...):)
    h.replace_reconciler(
        "charge", lambda args, action: {"charged": args["amount"]} if charged else NOT_EXECUTED
    )
    h.replace_tool("ship", lambda item: f"TRACK-{item}")

    run = h.client.enqueue("order", {"item": "book", "amount": 30})
    h.crash_at("after_effect", tool="charge")  # the worker dies after the charge, before its result is saved
    h.start_worker()  # a new worker takes the run over once the lease has expired
    h.wait(run.id, "waiting")  # the reconciler said "charged"; the run now sleeps for a day
    h.advance(24 * 3600)  # the day passes: the schema's clock moves on
    done = h.wait(run.id)

    assert done.state == "succeeded" and charged == [30]  # charged once
    assert [(e["kind"], e["op"]) for e in h.journal(run.id)] == [
        ("intention", "op-1"),  # written before the charge
        ("result", "op-1"),  # written after the crash, from the reconciler's answer
        ("timer", "op-2"),
        ("intention", "op-3"),
        ("result", "op-3"),
    ]
    assert h.journal(run.id)[1]["how"] == "reconciler: executed"
    # -- to here --
