"""Make the bundles kept in tests/bundles from real runs (a real worker on real Postgres and
Redis). From the repository root: ``PYTHONPATH=. python tests/bundles/make.py`` (the servers of
``OUTLAST_TEST_DATABASE_URL`` / ``OUTLAST_TEST_REDIS_URL``). The replay tests read them."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
from pathlib import Path
from typing import Any

from outlast import AsyncClient
from outlast._bundle import export
from outlast._journal import args_hash
from outlast.testing import Harness
from tests.apps import orders

DB = os.environ.get("OUTLAST_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
RD = os.environ.get("OUTLAST_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
OUT = Path(__file__).parent


def dump(h: Harness, run_id: str, out: Path) -> None:
    async def go() -> None:
        async with AsyncClient(settings=h.settings) as c:
            await export(c, run_id, out)

    if out.exists():
        shutil.rmtree(out)
    asyncio.run(go())


def orders_bundles() -> None:
    with Harness.create(orders.app, DB, RD, secret_key="k" * 32) as h:
        h.start_worker()
        note = {"item": "book", "qty": 2, "note": "gift wrap, please"}
        done = h.client.enqueue("order", note, run_id="order-2-books").id
        h.wait(done, "succeeded")
        waiting = h.client.enqueue("order", {"item": "lamp", "qty": 8}, run_id="order-8-lamps").id
        h.wait(waiting, "awaiting_approval")
        approved = h.client.enqueue("order", {"item": "book", "qty": 6}, run_id="order-6-approved").id
        h.wait(approved, "awaiting_approval")
        shown = args_hash({"item": "book", "qty": 6})
        h.client.approve(approved, "op-3", comment="stock checked", args_hash=shown, approver="ops")
        h.wait(approved, "succeeded")
        for run_id in (done, waiting, approved):
            dump(h, run_id, OUT / "orders" / run_id)


def myshop_bundles() -> None:
    """The testing page's app (docs/testing.md), its services replaced as the page's test does."""
    code = re.search(r"```python\n(.*?)```", (OUT.parent.parent / "docs" / "testing.md").read_text(), re.S)
    assert code is not None
    ns: dict[str, Any] = {}
    exec(compile(code[1], "myshop", "exec"), ns)
    with Harness.create(ns["app"], DB, RD) as h:
        h.replace_tool("charge", lambda amount: {"charged": amount})
        h.replace_tool("ship", lambda item: f"TRACK-{item}")
        h.start_worker()
        done = h.client.enqueue("order", {"item": "book", "amount": 30}, run_id="order-book").id
        h.wait(done, "waiting")
        h.advance(24 * 3600)
        h.wait(done, "succeeded")
        asleep = h.client.enqueue("order", {"item": "lamp", "amount": 45}, run_id="order-lamp").id
        h.wait(asleep, "waiting")  # asleep for a day: a run a deploy would resume
        for run_id in (done, asleep):
            dump(h, run_id, OUT / "myshop" / run_id)


if __name__ == "__main__":
    orders_bundles()
    myshop_bundles()
