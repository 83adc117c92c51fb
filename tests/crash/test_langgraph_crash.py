"""A compiled LangGraph graph run by a workflow (DurableGraph) under a real crash: a worker process
killed right after the second of the graph's three nodes returned, then an unarmed worker resumes
the run. Counted in the world (tests/apps/graph_shop.py): the order looked up, the bank's charges,
the customer's emails, and each node's runs."""

from __future__ import annotations

import pytest

from outlast import Client
from tests.apps import graph_shop
from tests.conftest import World
from tests.crash import killed

pytestmark = pytest.mark.crash

APP = "tests.apps.graph_shop:app"


def test_killed_after_node_two_of_three_each_node_runs_once(world: World) -> None:
    graph_shop.setup(world.database_url, world.schema)
    with Client(settings=world.settings()) as c:
        run_id = c.enqueue("orders", {"order_id": "A1"}).id
        killed(world.worker(APP, OUTLAST_FAILPOINTS="after_result:orders.charge"))
        ran = world.sql("SELECT node FROM effects WHERE run_id = %s ORDER BY id", run_id)
        assert ran == [("lookup",), ("charge",)]  # killed with two nodes done, the third not begun
        world.worker(APP)
        run = c.wait(run_id, timeout=90)
        assert run.state == "succeeded", run.reason
        assert run.result == {"order_id": "A1", "amount": 30, "log": ["found A1", "charged 30", "notified"]}
        ran = dict(world.sql("SELECT node, count(*) FROM effects WHERE run_id = %s GROUP BY node", run_id))
        # The first node was replayed from the journal, not run again; the third ran once.
        assert (ran["lookup"], ran["notify"]) == (1, 1)
        # The charge's result was held (an idempotent node's is written with the run's next write)
        # when the worker died: it may have been sent again, with the same idempotency key.
        assert ran["charge"] in (1, 2)
        assert world.sql("SELECT order_id, amount FROM charges") == [("A1", 30)]
        assert world.sql("SELECT body FROM emails WHERE run_id = %s", run_id) == [("charged",)]
