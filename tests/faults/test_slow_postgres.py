"""Postgres that answers, but slowly: the worker reaches the private Postgres through a link that
delays every chunk (tests/nemesis/links.py), 50 ms a round trip, then 200 ms, while it runs a
workload. Every run succeeds with one effect per operation, none in doubt, none claimed twice (no
lease lost to slowness alone); the worker logs ``store.slow`` once an episode of round trips over
``OUTLAST_SLOW_ROUND_TRIP`` and ``store.fast_again`` once at its end; ``outlast health`` through the link
fails, naming the round trip and the threshold, and passes again once the delay is gone."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator

import psycopg
import pytest

from tests.conftest import wait_for
from tests.faults import FaultWorld, check_every_run_once, enqueue_many
from tests.nemesis.links import Link, Links

pytestmark = pytest.mark.slow

RUNS = 40


@pytest.fixture
def link(fw: FaultWorld) -> Iterator[Link]:
    links = Links()
    pg = fw.pg
    assert pg is not None
    try:
        yield links.link("pg", lambda: pg.port)
    finally:
        links.close()


def through(fw: FaultWorld, link: Link) -> FaultWorld:
    """The same world, its outlast Postgres reached through ``link`` (the effects' is not)."""
    return dataclasses.replace(fw, database_url=f"postgresql://postgres@127.0.0.1:{link.port}/postgres")


def round_trip(url: str) -> float:
    """The median of a few ``SELECT 1`` round trips, in seconds."""
    with psycopg.connect(url, autocommit=True) as c:
        found = []
        for _ in range(5):
            t = time.perf_counter()
            c.execute(b"SELECT 1").fetchone()
            found.append(time.perf_counter() - t)
    return sorted(found)[2]


def slow(link: Link, rtt: float) -> None:
    link.slow(rtt / 2)  # each way


def episodes(fw: FaultWorld, name: str) -> list[str]:
    """The worker's ``store.slow`` and ``store.fast_again`` lines, in the order it logged them."""
    lines = fw.logged("store.slow", worker=name) + fw.logged("store.fast_again", worker=name)
    return [e["event"] for e in sorted(lines, key=lambda e: e["timestamp"])]


@pytest.mark.timeout(240)
def test_slow_postgres_fails_no_run_and_moves_none(fw: FaultWorld, link: Link) -> None:
    far = through(fw, link)
    workers = ["slow-0", "slow-1"]
    for name in workers:
        far.start(name, "-c", "16")
    ids: list[str] = []
    for rtt in (0.05, 0.2):
        slow(link, rtt)
        measured = round_trip(far.database_url)
        print(f"\nround trip through the link: {measured * 1000:.0f} ms (asked {rtt * 1000:.0f} ms)")
        batch = enqueue_many(fw, "chain", [{"tool": "slow_effect", "n": 5, "seconds": 0.2}] * RUNS)
        took = fw.wait_settled(batch, timeout=150)
        print(f"{RUNS} runs settled in {took:.1f} s")
        ids += batch
    slow(link, 0.0)
    # Each episode is logged once, then its end once (a loaded machine may make a 50 ms beat slow
    # too: episodes alternate, whatever their number); the last one has ended.
    for name in workers:
        wait_for(lambda n=name: episodes(fw, n)[-1:] == ["store.fast_again"], 10, 0.1, f"{name} fast again")
        seen = episodes(fw, name)
        assert seen == ["store.slow", "store.fast_again"] * (len(seen) // 2), seen
    check_every_run_once(fw, ids)
    moved = fw.sql("SELECT count(*) FROM runs WHERE id = ANY(%s) AND fencing_token > 1", ids)[0][0]
    assert moved == 0, f"{moved} runs changed hands while Postgres was only slow:\n{fw.log_tail()}"
    assert not fw.logged("lease.lost"), fw.log_tail()
    for name in workers:
        found = fw.logged("store.slow", worker=name)[0]
        assert found["round_trip_ms"] > 100 and found["threshold_ms"] == 100, found
        assert "renewed every 0.667s" in found["risks"], found


def test_health_fails_while_postgres_is_slow(fw: FaultWorld, link: Link) -> None:
    far = through(fw, link)
    healthy = far.cli("health")
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    slow(link, 0.2)
    found = far.cli("health")
    assert found.returncode == 1, found.stdout + found.stderr
    assert "round trip took" in found.stderr, found.stderr
    assert "over 100 ms (OUTLAST_SLOW_ROUND_TRIP" in found.stderr, found.stderr
    slow(link, 0.0)
    again = far.cli("health")
    assert again.returncode == 0, again.stderr
