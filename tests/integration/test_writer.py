"""The shared-commit writer on a real Postgres: what its batches carry, and what a failure undoes."""

from __future__ import annotations

import asyncio
import random

import psycopg
import pytest

from outlast.errors import ServiceUnavailable
from outlast.store import Store, lane as writer_module, wire as wire_module
from outlast.store.wire import Row
from tests.conftest import World


async def opened(world: World, url: str | None = None, retry_for: float = 60.0) -> Store:
    s = Store(url or world.database_url, world.schema, retry_for=retry_for)
    await s.open()
    await s.writer.write("SELECT 1", {})  # the writer's connection, made before counting
    return s


async def test_rows_come_back_as_dicts_of_their_columns(world: World) -> None:
    """A name used twice is one parameter; ``%%`` is a literal percent sign; no rows is []."""
    store = await opened(world)
    sql = "SELECT %(a)s::int AS a, %(a)s::int + %(b)s::int AS b, 7 %% 4 AS m, %(t)s::text AS t"
    rows = await asyncio.gather(*(store.writer.write(sql, {"a": i, "b": 10, "t": None}) for i in range(3)))
    assert rows == [[{"a": i, "b": i + 10, "m": 3, "t": None}] for i in range(3)]
    assert await store.writer.write("SELECT 1 AS one WHERE false", {}) == []
    assert await store.writer.write("CREATE TEMP TABLE scratch (n int)", {}) == []
    await store.close()


async def test_a_batch_is_capped_by_the_bytes_it_carries(world: World) -> None:
    """Large payloads go in several transactions (each within the stall bound), not in one."""
    store = await opened(world)
    payload = "x" * (writer_module.MAX_BATCH_BYTES * 3 // 8)  # two fit in a batch, three do not
    before = store.writer.commits
    sql = "SELECT %(i)s::int AS i, length(%(p)s) AS n"
    rows = await asyncio.gather(*(store.writer.write(sql, {"i": i, "p": payload}) for i in range(8)))
    assert [r[0]["i"] for r in rows] == list(range(8))
    assert all(r[0]["n"] == len(payload) for r in rows)
    assert store.writer.commits - before == 4
    await store.close()


async def test_a_failed_batch_is_undone_whole_before_its_writes_are_tried_again(world: World) -> None:
    """The batch is one transaction: a write that is not idempotent, beside one that fails, takes
    effect once (its first try was rolled back with the failure), not twice."""
    world.sql("CREATE TABLE tally (n int NOT NULL)")
    world.sql("INSERT INTO tally VALUES (0)")
    store = await opened(world, retry_for=1.0)
    bump = store.writer.write("UPDATE tally SET n = n + 1 RETURNING n", {}, key="a")
    bad = store.writer.write("UPDATE tally SET n = NULL RETURNING n", {}, key="b")
    results = await asyncio.gather(bump, bad, return_exceptions=True)
    assert results[0] == [{"n": 1}]
    assert isinstance(results[1], ServiceUnavailable)
    assert isinstance(results[1].__cause__, psycopg.errors.NotNullViolation)
    assert world.sql("SELECT n FROM tally") == [(1,)]
    # The statements prepared in the failed batch serve the next ones.
    assert await store.writer.write("UPDATE tally SET n = n + 1 RETURNING n", {}) == [{"n": 2}]
    await store.close()


async def test_a_statement_postgres_cannot_prepare_fails_alone(world: World) -> None:
    store = await opened(world, retry_for=0.5)
    bad = store.writer.write("SELECT no_such_column FROM runs", {})
    good = store.writer.write("SELECT %(i)s::int AS i", {"i": 1})
    results = await asyncio.gather(bad, good, return_exceptions=True)
    assert isinstance(results[0], ServiceUnavailable)
    assert isinstance(results[0].__cause__, psycopg.errors.UndefinedColumn)
    assert results[1] == [{"i": 1}]
    await store.close()


@pytest.mark.parametrize("encoding", ["LATIN1", "UTF8"])
async def test_text_is_sent_in_the_connections_client_encoding(world: World, encoding: str) -> None:
    """Parameters are adapted with the writer connection's own context: a client encoding other
    than UTF-8 keeps a journal body's characters as they are."""
    sep = "&" if "?" in world.database_url else "?"
    store = await opened(world, url=f"{world.database_url}{sep}client_encoding={encoding}")
    text = "d\u00e9j\u00e0 vu"
    rows = await store.writer.write("SELECT %(t)s::text AS t, length(%(t)s::text) AS n", {"t": text})
    assert rows == [{"t": text, "n": len(text)}]
    await store.close()


@pytest.mark.parametrize("kind", ["text[]", "integer[]"])
def test_a_list_sent_as_an_array_literal_arrives_as_it_was(world: World, kind: str) -> None:
    """The writer sends a list of texts or of whole numbers as Postgres's array literal, built by
    hand (``wire._array_literal``): every text Postgres can store comes back the same, quotes,
    backslashes, braces, commas, blanks, 'NULL', the empty text and non-ASCII included."""
    texts = ['"', "\\", '\\"', "{a,b}", "a,b", " lead", "trail ", "NULL", "null", "", "é — 日本", "}{", "'"]
    items: list[object] = texts if kind == "text[]" else [0, -1, 2**31 - 1, 7]
    literal = wire_module._array_literal(items)
    assert isinstance(literal, str)  # the hand-built path, not psycopg's dumper
    with psycopg.connect(world.database_url) as c:
        (back,) = c.execute(f"SELECT %s::{kind}", [literal]).fetchone() or (None,)
    assert back == items


async def test_lanes_keep_each_runs_order_and_never_deadlock(world: World) -> None:
    """Three transactions in flight at once, over 100 runs that each write 20 times (a write, a
    second queued while the first may be in flight, then a pause, as a run's held results, its
    appends and its tools go): each write is refused
    unless the run's previous one committed before it, and each locks its run's row, as journal
    appends do, beside rows of runs the other lanes carry."""
    world.sql("CREATE TABLE steps (run text, n int, PRIMARY KEY (run, n))")
    world.sql("CREATE TABLE tally (run text PRIMARY KEY, n int NOT NULL)")
    world.sql("INSERT INTO tally SELECT 'r' || g, 0 FROM generate_series(0, 99) g")
    deadlocks = "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"
    before = world.sql(deadlocks)
    store = Store(world.database_url, world.schema, retry_for=5.0, in_flight=3)
    await store.open()
    step = (
        "WITH t AS (UPDATE tally SET n = n + 1 WHERE run = %(run)s AND n = %(n)s RETURNING n)"
        " INSERT INTO steps SELECT %(run)s, n FROM t RETURNING n"
    )
    pace = random.Random(7)

    async def run(r: int) -> list[list[Row]]:
        done = []
        for n in range(0, 20, 2):
            first = store.writer.submit(step, {"run": f"r{r}", "n": n}, key=f"r{r}")
            await asyncio.sleep(pace.random() / 1000)
            second = store.writer.submit(step, {"run": f"r{r}", "n": n + 1}, key=f"r{r}")
            done += await asyncio.gather(first, second)
            await asyncio.sleep(pace.random() / 500)
        return done

    rows = await asyncio.gather(*(run(r) for r in range(100)))
    assert all(all(r) for r in rows), "a run's write committed before its earlier one"
    assert world.sql("SELECT count(*), min(n), max(n) FROM tally") == [(100, 20, 20)]
    assert sum(1 for lane in store.writer.lanes if lane.commits) > 1, "one lane did all the work"
    assert world.sql(deadlocks) == before
    await store.close()
