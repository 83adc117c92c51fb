"""``outlast demo`` end to end: real worker processes, a planned crash, a resume, one transfer."""

from __future__ import annotations

import re

import psycopg

from tests.conftest import World


def test_demo_tells_the_story_with_exactly_one_transfer(world: World) -> None:
    demo_schema, bank = f"{world.schema}_demo", f"{world.schema}_demo_bank"
    try:
        for _ in range(2):  # the second run starts clean too
            out = world.cli("demo")
            assert out.returncode == 0, out.stdout + out.stderr
            text = out.stdout
            assert "Traceback" not in text + out.stderr
            run_id = re.search(r"Enqueued run (\w+)", text)
            assert run_id is not None, text
            rid = run_id[1]
            assert "demo-1 died (SIGKILL) after the bank executed the transfer" in text
            assert "pending: transfer (op-1)" in text
            assert f"↻ resuming run {rid}: 1 journaled entries re-derived with no effect" in text
            assert "intention without result: transfer (op-1" in text
            assert "↻ transfer (op-1): dispatched again with the same idempotency key" in text
            assert "Exactly one transfer" in text
            rows = world.sql(f'SELECT idempotency_key, amount, requests FROM "{bank}".ledger ORDER BY id')
            assert rows[0] == (f"{rid}:op-1", 120, 2)  # asked twice, executed once
            assert [r[2] for r in rows[1:]] == [1, 1]  # the two plain runs
            runs = world.sql(f'SELECT state, count(*) FROM "{demo_schema}".runs GROUP BY state')
            assert runs == [("succeeded", 3)]
            notified = world.sql(f'SELECT count(*) FROM "{bank}".outbox')
            assert notified == [(3,)]
        assert world.sql("SELECT count(*) FROM runs") == [(0,)]  # the test's own schema untouched
    finally:
        with psycopg.connect(world.database_url, autocommit=True) as c:
            for schema in (demo_schema, bank):
                c.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'.encode())


def test_demo_agent_resumes_the_agent_without_asking_the_model_again(world: World) -> None:
    demo_schema = f"{world.schema}_demo"
    schemas = (demo_schema, f"{demo_schema}_bank", f"{demo_schema}_shop")
    try:
        out = world.cli("demo", "agent")
        assert out.returncode == 0, out.stdout + out.stderr
        text = out.stdout
        assert "Traceback" not in text + out.stderr
        rid = re.search(r"Enqueued run (\w+)", text)
        assert rid is not None, text
        assert "demo-1 died (SIGKILL) after the refund" in text
        assert "The model had answered 2 requests" in text
        assert "dispatched again with the same idempotency key" in text
        assert "The model was asked 4 times, for steps [1, 2, 3, 4]: none asked twice." in text
        assert "Exactly one refund" in text
        shop = f"{demo_schema}_shop"
        assert world.sql(f'SELECT order_id, amount, requests FROM "{shop}".refunds') == [("A7", 80, 2)]
        assert world.sql(f'SELECT count(*) FROM "{shop}".outbox') == [(1,)]
    finally:
        with psycopg.connect(world.database_url, autocommit=True) as c:
            for schema in schemas:
                c.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'.encode())
