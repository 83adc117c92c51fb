"""The run page's children tree is read in one statement, however many children a run has: the
statements a page view costs do not grow with its children, and the tree keeps its bounds (four
levels, 200 runs, nearer levels first, each run's children by age)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from outlast import Client
from outlast.dashboard import create_app
from outlast.dashboard.views import TREE_DEPTH, TREE_RUNS, children_tree
from outlast.identity import add_user
from outlast.producer import AsyncClient
from outlast.settings import Settings
from outlast.store.queries import Q
from tests.conftest import World

KIDS = """
INSERT INTO runs (id, workflow, input, input_hash, state, started_by, created_at)
SELECT p.id || '.' || lpad(i::text, 4, '0'), 'kid', '{}', 'h', 'succeeded', p.id,
       p.created_at + make_interval(secs => i)
FROM runs p, generate_series(1, %s) AS i WHERE p.id LIKE %s
"""


@pytest.fixture
def site(world: World) -> Iterator[tuple[TestClient, Settings, dict[str, str]]]:
    users = world.tmp / "users.toml"
    bob = {"Authorization": f"Bearer {add_user(users, 'bob', ['viewers'])}"}
    settings = world.settings(users=str(users))
    with TestClient(create_app(settings), base_url="http://127.0.0.1") as tc:
        yield tc, settings, bob


def family(world: World, settings: Settings, root: str, kids: int, grandkids: int) -> None:
    """``root`` (nobody serves its queue), ``kids`` children started by it, each with ``grandkids``."""
    with Client(settings=settings) as c:
        c.enqueue("parent", {}, run_id=root, queue="nobody")
    world.sql(KIDS, kids, root)
    world.sql(KIDS, grandkids, root + ".____")  # each child's


def reads(tc: TestClient, path: str, headers: dict[str, str]) -> int:
    """The statements the dashboard's client sent to show ``path``."""
    store = tc.app.state.client.store  # type: ignore[attr-defined]
    before = store.reads
    page = tc.get(path, headers=headers)
    assert page.status_code == 200, page.text[:300]
    n: int = store.reads - before
    return n


def test_a_page_costs_the_same_statements_with_two_children_or_a_hundred_and_fifty(
    world: World, site: tuple[TestClient, Settings, dict[str, str]]
) -> None:
    tc, settings, bob = site
    family(world, settings, "small", 2, 1)
    family(world, settings, "large", 150, 2)
    small, large = reads(tc, "/runs/small", bob), reads(tc, "/runs/large", bob)
    assert small == large, (small, large)  # one statement for the tree, whatever its size
    page = tc.get("/runs/large", headers=bob).text
    tree = re.search(r'<div id="children">(.*?)</div>', page, re.S)
    assert tree is not None and tree.group(1).count("<li>") == TREE_RUNS


def test_the_tree_keeps_its_bounds_and_its_order(
    world: World, site: tuple[TestClient, Settings, dict[str, str]]
) -> None:
    _, settings, _ = site
    family(world, settings, "r", 150, 2)  # 150 children, 300 grandchildren
    deep = "d"  # a chain six levels deep
    with Client(settings=settings) as c:
        c.enqueue("parent", {}, run_id=deep, queue="nobody")
    below = deep
    for _ in range(6):
        world.sql(KIDS, 1, below)
        below += ".0001"

    async def read(run_id: str) -> list[dict[str, Any]]:
        async with AsyncClient(settings=settings) as c:
            return await children_tree(c, run_id)

    tree = asyncio.run(read("r"))
    assert [k["id"] for k in tree] == [f"r.{i:04}" for i in range(1, 151)]  # every child, by age
    grand = [g["id"] for k in tree for g in k["children"]]
    assert len(grand) == TREE_RUNS - 150 and grand[:3] == ["r.0001.0001", "r.0001.0002", "r.0002.0001"]
    assert all(g["children"] == [] for k in tree for g in k["children"])
    assert {k["state"] for k in tree} == {"succeeded"} and tree[0]["workflow"] == "kid"

    chain, levels = asyncio.run(read(deep)), 0
    while chain:
        [node], levels = chain, levels + 1
        chain = node["children"]
    assert levels == TREE_DEPTH


def test_a_fan_out_of_thousands_reads_only_the_rows_shown(
    world: World, site: tuple[TestClient, Settings, dict[str, str]]
) -> None:
    _, settings, _ = site
    family(world, settings, "wide", 3000, 2)  # 3,000 children, 6,000 grandchildren
    world.sql("ANALYZE runs")
    values = {"run_id": "'wide'", "depth": str(TREE_DEPTH), "most": str(TREE_RUNS)}
    sql = re.sub(r"%\((\w+)\)s", lambda m: values[m[1]], Q["children_tree"])
    [[plan]] = world.sql("EXPLAIN (ANALYZE, FORMAT JSON) " + sql)
    assert plan[0]["Plan"]["Actual Rows"] == TREE_RUNS
    assert scanned(plan[0]["Plan"]) <= TREE_RUNS + 1, plan  # the recursion stops with the rows fetched


def scanned(plan: dict[str, Any]) -> int:
    """The table rows a plan's scans read: those returned and those a filter threw away."""
    n = 0
    if plan["Node Type"] in ("Seq Scan", "Index Scan", "Bitmap Heap Scan"):
        n = plan["Actual Rows"] * plan["Actual Loops"] + plan.get("Rows Removed by Filter", 0)
    return n + sum(scanned(p) for p in plan.get("Plans", []))


def test_the_run_api_lists_the_first_children_and_says_there_are_more(
    world: World, site: tuple[TestClient, Settings, dict[str, str]]
) -> None:
    """The status lists a run's children up to the tree's bound, the first started, and says
    when more were started than it lists."""
    tc, settings, bob = site
    family(world, settings, "wide", TREE_RUNS + 50, 0)
    family(world, settings, "few", 3, 0)
    wide = tc.get("/api/runs/wide", headers=bob).json()
    assert [k["id"] for k in wide["children"]] == [f"wide.{i:04}" for i in range(1, TREE_RUNS + 1)]
    assert wide["children_truncated"] is True
    few = tc.get("/api/runs/few", headers=bob).json()
    assert len(few["children"]) == 3 and few["children_truncated"] is False
