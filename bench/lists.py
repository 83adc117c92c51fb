"""The runs list at a million runs (migration 0020): the p95 of each list query the dashboard,
/api/runs and ``outlast runs`` offer, its first page and the page after, against a target of
50 ms. The table is seeded as tests/integration/test_run_lists.py seeds it (one INSERT ... SELECT
generate_series, its indexes built after), in a schema of its own, dropped at the end.

    PYTHONPATH=. python bench/lists.py [--rows 1000000] [--repeat 40]
    PYTHONPATH=. python bench/lists.py --enqueue [--runs 500 --rounds 5]

``--enqueue`` measures what 0020's indexes cost a producer instead: the p50 of ``enqueue``, one run
at a time, on a schema migrated to 19 (the base) and on one migrated to 20 (the list indexes),
alternating between the two call by call (a round's drift falls on both alike).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid

from common import DEFAULT_DB

from outlast._listing import PAGE, after_of, cursor_of
from outlast.producer import AsyncClient
from outlast.settings import Settings
from outlast.store import Store
from tests.conftest import drop_schemas
from tests.integration.test_run_lists import CASES, seed

TARGET_MS = 50.0


async def measure(db: str, schema: str, repeat: int) -> list[tuple[str, float, float]]:
    """Each case's p95 in ms, first page and second, through the store as the client reads."""
    s = Store(db, schema)
    await s.open()
    out = []
    try:
        for name, query in CASES.items():
            first = await s.listing.runs_page(query, (None, None), PAGE + 1)
            after = after_of(query, cursor_of(query, first[PAGE - 1]))
            times: dict[str, list[float]] = {"first": [], "next": []}
            for _ in range(repeat):
                for which, start in (("first", (None, None)), ("next", after)):
                    t = time.perf_counter()
                    await s.listing.runs_page(query, start, PAGE + 1)
                    times[which].append((time.perf_counter() - t) * 1000)
            p95 = {k: statistics.quantiles(v, n=20)[-1] for k, v in times.items()}
            out.append((name, p95["first"], p95["next"]))
        sizes = await s.execute(
            "SELECT indexrelid::regclass::text AS name, pg_relation_size(indexrelid) AS size "
            "FROM pg_index WHERE indrelid = 'runs'::regclass ORDER BY 2 DESC"
        )
        table = await s.execute("SELECT pg_relation_size('runs') AS size")
        print(f"runs: {table[0]['size'] / 2**20:.0f} MiB; its indexes (MiB):")
        print(", ".join(f"{r['name']} {r['size'] / 2**20:.0f}" for r in sizes))
    finally:
        await s.close()
    return out


async def _client(db: str, schema: str) -> AsyncClient:
    """A producer on ``schema`` (its Redis: db 15, a prefix of its own)."""
    c = AsyncClient(
        settings=Settings(
            database_url=db, redis_url="redis://127.0.0.1:6379/15", schema=schema, prefix=schema
        )
    )
    await c.store.open(check=False)  # the base schema is one version older than this code
    c._opened = True
    return c


async def enqueue_pairs(db: str, schemas: dict[str, str], runs: int) -> dict[str, list[float]]:
    """``runs`` enqueues on each schema, one at a time and alternating call by call (the order
    of each pair swapped every time), so that the machine's drift falls on both alike: the time
    of each in ms."""
    clients = {name: await _client(db, schema) for name, schema in schemas.items()}
    took: dict[str, list[float]] = {name: [] for name in schemas}
    try:
        for i in range(runs):
            for name in clients if i % 2 == 0 else reversed(list(clients)):
                t = time.perf_counter()
                await clients[name].enqueue("bench", {"customer": f"c-{i}"}, tenant=f"t{i % 7}")
                took[name].append((time.perf_counter() - t) * 1000)
    finally:
        for c in clients.values():
            await c.close()
    return took


def compare_enqueue(db: str, runs: int, rounds: int) -> None:
    versions = {"base (19)": 19, "0020": 20}  # the version before the list indexes, and theirs
    got: dict[str, list[float]] = {name: [] for name in versions}
    per_round: list[float] = []
    for _ in range(rounds):
        schemas = {name: f"bench_{uuid.uuid4().hex[:8]}" for name in versions}

        async def go(schemas: dict[str, str] = schemas) -> dict[str, list[float]]:
            for name, schema in schemas.items():
                s = Store(db, schema)
                await s.open(check=False)
                await s.migrate(to=versions[name])
                await s.close()
            return await enqueue_pairs(db, schemas, runs)

        try:
            took = asyncio.run(go())
        finally:
            drop_schemas(db, *schemas.values())
        for name, ms in took.items():
            got[name].extend(ms)
        per_round.append(statistics.median(took["0020"]) / statistics.median(took["base (19)"]) - 1)
    base, new = statistics.median(got["base (19)"]), statistics.median(got["0020"])
    print(
        f"enqueue p50, {runs} runs x {rounds} rounds, alternating call by call: base {base:.3f} ms, "
        f"with 0020 {new:.3f} ms ({new / base - 1:+.1%}); per round: median "
        f"{statistics.median(per_round):+.1%} (min {min(per_round):+.1%}, max {max(per_round):+.1%})"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--database-url", default=DEFAULT_DB)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=40)
    ap.add_argument("--enqueue", action="store_true", help="the producer's cost of 0020 instead")
    ap.add_argument("--runs", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    if a.enqueue:
        compare_enqueue(a.database_url, a.runs, a.rounds)
        return
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    t = time.perf_counter()
    seed(a.database_url, schema, a.rows)
    print(f"seeded {a.rows:,} runs in {time.perf_counter() - t:.0f} s; page {PAGE}, {a.repeat} reads each")
    try:
        rows = asyncio.run(measure(a.database_url, schema, a.repeat))
    finally:
        drop_schemas(a.database_url, schema)
    print("| list | p95 first page (ms) | p95 next page (ms) | target |")
    print("|---|---:|---:|---|")
    for name, first, nxt in rows:
        ok = "ok" if max(first, nxt) <= TARGET_MS else "OVER"
        print(f"| {name} | {first:.1f} | {nxt:.1f} | {ok} (<= {TARGET_MS:.0f} ms) |")


if __name__ == "__main__":
    main()
