"""The runs list at scale (migration 0020): with a million runs in the table, every filter and
sort the dashboard, /api/runs and ``outlast runs`` offer reads at most twice a page of rows, on
the first page and deep in the list; and a cursor is stable while runs are enqueued."""

from __future__ import annotations

import asyncio
import json
import os
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from outlast._listing import COUNTED, PAGE, RunQuery, after_of, cursor_of
from outlast._model import RunState
from outlast.errors import InvalidInput
from outlast.producer import AsyncClient
from outlast.settings import Settings
from outlast.store import Store
from outlast.store.listing import page_statement
from outlast.store.queries import Q
from tests.conftest import drop_schemas

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]  # the seed: about a minute, two busy cores

ROWS = 1_000_000
T0 = datetime(2026, 1, 1, tzinfo=UTC)

# One statement: ids run-0000001.., 20 workflows, 5 queues, tenants on two thirds, 1% high and 9%
# low priority, 70% succeeded, 10% failed, 1 in 1,000 waiting in doubt, 10,000 children of
# run-0000001, a customer shared by 83 runs; a second between runs, started a second after.
SEED = """
INSERT INTO runs (id, workflow, queue, input, input_hash, state, reason, tenant, priority,
                  started_by, created_at, started_at, finished_at, published_at)
SELECT 'run-' || lpad(i::text, 7, '0'), 'wf-' || (i %% 20), 'q' || (i %% 5),
       jsonb_build_object('customer', 'c-' || (i %% 12000)), 'h',
       CASE WHEN i %% 10 < 7 THEN 'succeeded' WHEN i %% 10 = 7 THEN 'failed'
            WHEN i %% 10 = 8 THEN 'waiting' ELSE 'queued' END,
       CASE WHEN i %% 1000 = 8 THEN 'in_doubt' WHEN i %% 10 = 8 THEN 'timer' END,
       CASE WHEN i %% 3 > 0 THEN 't' || (i %% 50) END,
       CASE WHEN i %% 100 = 0 THEN 'high' WHEN i %% 10 = 0 THEN 'low' ELSE 'normal' END,
       CASE WHEN i %% 100 = 1 AND i > 1 THEN 'run-0000001' END,
       %s::timestamptz + make_interval(secs => i),
       CASE WHEN i %% 10 < 9 THEN %s::timestamptz + make_interval(secs => i + 1) END,
       CASE WHEN i %% 10 < 8 THEN %s::timestamptz + make_interval(secs => i + 2 + i %% 60) END,
       %s::timestamptz + make_interval(secs => i)
FROM generate_series(1, %s) AS i
"""

CASES: dict[str, RunQuery] = {
    "newest": RunQuery(),
    "state": RunQuery(state="failed"),
    "workflow": RunQuery(workflow="wf-7"),
    "queue": RunQuery(queue="q3"),
    "tenant": RunQuery(tenant="t13"),
    "priority": RunQuery(priority="high"),
    "parent": RunQuery(parent="run-0000001"),
    "in_doubt": RunQuery(in_doubt=True),
    "time range": RunQuery(since=T0 + timedelta(days=3), until=T0 + timedelta(days=4)),
    "id prefix": RunQuery(id_prefix="run-0004"),
    "input": RunQuery(input={"customer": "c-42"}),
    "by started": RunQuery(sort="started"),
    "by finished": RunQuery(sort="finished"),
    "started, time range": RunQuery(
        sort="started", since=T0 + timedelta(days=2), until=T0 + timedelta(days=5)
    ),
    "state and time range": RunQuery(state="succeeded", since=T0 + timedelta(days=3)),
}


def rows_read(plan: dict[str, Any]) -> int:
    """The table rows a plan's scans read: those returned and those a filter threw away (an
    index-only scan reads none but those it fetches to see whether they are visible)."""
    n = 0
    if plan["Node Type"] in ("Seq Scan", "Index Scan", "Bitmap Heap Scan"):
        n += plan["Actual Rows"] * plan["Actual Loops"]
        n += plan.get("Rows Removed by Filter", 0) + plan.get("Rows Removed by Index Recheck", 0)
    elif plan["Node Type"] == "Index Only Scan":
        n += plan["Heap Fetches"] + plan.get("Rows Removed by Filter", 0)
    return n + sum(rows_read(p) for p in plan.get("Plans", []))


def seed(db: str, schema: str, rows: int = ROWS) -> None:
    """A schema of its own with ``rows`` runs, seeded in one statement. Its indexes on runs (all of
    them, 0020's included) are dropped first and built again after: a sorted build takes a
    fraction of the time of a million inserts into each. Also bench/lists.py's seed."""
    drop_schemas(db, schema)

    async def migrate() -> None:
        s = Store(db, schema)
        await s.open(check=False)
        await s.migrate()
        await s.close()

    asyncio.run(migrate())
    with psycopg.connect(db, autocommit=True, options=f"-c search_path={schema}") as c:
        c.execute("SET maintenance_work_mem = '256MB'")
        made = c.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s AND tablename = 'runs' "
            "AND indexname <> 'runs_pkey'",
            [schema],
        ).fetchall()
        for name, _ in made:
            c.execute(f'DROP INDEX "{name}"'.encode())
        c.execute(SEED.encode(), [T0] * 4 + [rows])
        for _, definition in made:
            c.execute(definition.encode())
        c.execute("VACUUM ANALYZE runs")  # as autovacuum leaves a settled table: all visible


@pytest.fixture(scope="module")
def million(services: tuple[str, str]) -> Any:
    db, _ = services
    schema = f"t_runlists_{os.getpid()}"  # a process of its own (tests/conftest.py TOGETHER), and unique
    seed(db, schema)
    yield db, schema
    drop_schemas(db, schema)


Explained = tuple[int, dict[str, Any], list[dict[str, Any]]]


def explain(db: str, schema: str, query: RunQuery, cursor: str | None) -> Explained:
    sql, params = page_statement(query, after_of(query, cursor), PAGE + 1)
    with psycopg.connect(db, autocommit=True, options=f"-c search_path={schema}") as c:
        plan = c.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}".encode(), params).fetchone()
        assert plan is not None
        rows = c.cursor(row_factory=psycopg.rows.dict_row).execute(sql.encode(), params).fetchall()
    top = plan[0][0]["Plan"]
    return rows_read(top), top, rows


@pytest.mark.parametrize("name", list(CASES))
def test_every_list_reads_at_most_two_pages_of_rows(million: tuple[str, str], name: str) -> None:
    db, schema = million
    query = CASES[name]
    cursor = None
    for page in range(3):  # the first page, the next, and one deep in the list
        n, plan, rows = explain(db, schema, query, cursor)
        assert n <= 2 * PAGE, f"{name}, page {page}: read {n} rows\n{json.dumps(plan, indent=1)}"
        assert page > 0 or len(rows) == PAGE + 1, f"{name}: the seed gives every list more than a page"
        if len(rows) <= PAGE:
            break  # the list's last page (a search of 83 runs)
        cursor = cursor_of(query, rows[PAGE - 1]) if page == 0 else cursor_of(query, rows[-1])
        if page == 1:  # deep: after a row found by its key halfway down the list
            mid = rows[-1] if query.key == "id" else _halfway(db, schema, query, rows[-1])
            cursor = cursor_of(query, mid)


def _halfway(db: str, schema: str, query: RunQuery, last: dict[str, Any]) -> dict[str, Any]:
    """A row of the list well below the second page (its key five days older)."""
    key = query.key
    sql, params = page_statement(query, (last[key] - timedelta(days=5), "run-9999999"), 1)
    with psycopg.connect(db, autocommit=True, options=f"-c search_path={schema}") as c:
        row = c.cursor(row_factory=psycopg.rows.dict_row).execute(sql.encode(), params).fetchone()
    return row if row is not None else last


async def test_paging_while_runs_are_enqueued_neither_repeats_nor_skips(million: tuple[str, str]) -> None:
    db, schema = million
    c = AsyncClient(settings=Settings(database_url=db, redis_url="redis://127.0.0.1:6379/15", schema=schema))
    await c.open()
    try:
        query = RunQuery(workflow="wf-3", since=T0 + timedelta(days=11))
        listed = await c.store.execute(
            "SELECT id FROM runs WHERE workflow = 'wf-3' AND created_at >= %s "
            "ORDER BY created_at DESC, id DESC",
            [T0 + timedelta(days=11)],
        )
        expected = [r["id"] for r in listed]
        seen: list[str] = []
        cursor: str | None = None
        n = 0
        while True:
            page, cursor = await c.runs_page(query, limit=PAGE, cursor=cursor)
            seen += [r.id for r in page]
            await c.store.execute(  # a run of the same workflow arrives between two pages
                "INSERT INTO runs (id, workflow, input, input_hash) VALUES (%s, 'wf-3', '{}', 'h')",
                [f"new-{n}"],
            )
            n += 1
            if cursor is None:
                break
        assert seen == expected
        assert len(seen) == len(set(seen)) > 2 * PAGE
    finally:
        await c.store.execute("DELETE FROM runs WHERE id LIKE 'new-%%'")
        await c.close()


def index_entries(plan: dict[str, Any]) -> int:
    """The index entries a plan's index scans returned, over all their loops."""
    n = plan["Actual Rows"] * plan["Actual Loops"] if "Index" in plan["Node Type"] else 0
    return n + sum(index_entries(p) for p in plan.get("Plans", []))


def test_the_counts_by_state_read_a_bounded_number_of_index_entries(million: tuple[str, str]) -> None:
    """Every runs page, /api/runs call and live refresh counts the runs by state: each state is
    counted up to COUNTED (then shown as more), from its index alone, never the whole table."""
    db, schema = million
    params = {"states": list(RunState), "most": COUNTED}
    with psycopg.connect(db, autocommit=True, options=f"-c search_path={schema}") as c:
        plan = c.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {Q['count_by_state']}".encode(), params)
        top = plan.fetchone()[0][0]["Plan"]  # type: ignore[index]
        counts = dict(c.execute(Q["count_by_state"].encode(), params).fetchall())
    large = ("succeeded", "failed", "waiting", "queued")
    assert counts == {s: COUNTED + 1 if s in large else 0 for s in RunState}
    # From the index: rows of runs are read only to check a page's visibility (none once vacuumed;
    # the other tests of this module add runs to the same table), never more than counted.
    assert rows_read(top) <= len(large) * (COUNTED + 1), json.dumps(top, indent=1)
    # Not a million: COUNTED + 1 entries of each large state (rows averaged per loop, rounded).
    assert index_entries(top) <= len(large) * (COUNTED + 1) + len(RunState), json.dumps(top, indent=1)


@pytest.mark.parametrize("search", [{"x": {}}, {"customer": {}}, {"customer": []}, {"a": {"b": []}}])
def test_an_input_search_no_index_serves_is_refused(million: tuple[str, str], search: dict[str, Any]) -> None:
    """An empty object or array names no value for the input's index to find: such a search
    would read every run, on every page. It is refused."""
    with pytest.raises(InvalidInput, match="not an empty object or array"):
        RunQuery(input=search)
    db, schema = million
    unchecked = RunQuery(input={"customer": "c-42"})
    object.__setattr__(unchecked, "input", search)  # the page it would have read
    sql, params = page_statement(unchecked, (None, None), PAGE + 1)
    with psycopg.connect(db, autocommit=True, options=f"-c search_path={schema}") as c:
        c.execute("SET max_parallel_workers_per_gather = 0")  # one scan: its rows removed are all
        plan = c.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}".encode(), params).fetchone()
    assert plan is not None
    assert rows_read(plan[0][0]["Plan"]) >= ROWS, json.dumps(plan, indent=1)
