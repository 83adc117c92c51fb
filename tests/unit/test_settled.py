"""``Heartbeat.settled``: a worker takes over no run until Postgres has answered its heartbeats
for a whole lease with no gap, from its first answer on (the outage test with a worker that
first reaches Postgres after the outage shows what goes wrong otherwise)."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any, cast

import pytest

from outlast.worker import heartbeat as hb
from outlast.worker.heartbeat import Heartbeat

TTL = 2.0


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    now = [1000.0]
    monkeypatch.setattr(hb, "time", SimpleNamespace(monotonic=lambda: now[0]))  # this module's clock only
    return now


def beat(h: Heartbeat, clock: list[float], every: float = 0.5, times: int = 1) -> None:
    for _ in range(times):
        clock[0] += every
        h._answered()


def heartbeat() -> Heartbeat:
    parts: Any = {
        "state": None,
        "leases": None,
        "fleet": None,
        "queue": None,
        "declared": [],
    }  # settled() reads none
    return Heartbeat(settings=cast(Any, SimpleNamespace(lease_ttl=TTL)), **parts)


def test_a_new_worker_is_not_settled_before_a_lease_of_answers(clock: list[float]) -> None:
    h = heartbeat()
    assert not h.settled()  # no answer yet: it knows nothing of an outage just over
    beat(h, clock)
    assert not h.settled()  # its first answer: the owners may not have renewed yet
    beat(h, clock, times=3)
    assert not h.settled()
    beat(h, clock)  # a lease after the first answer
    assert h.settled()


def test_a_failure_or_a_silence_unsettles_it_for_a_lease(clock: list[float]) -> None:
    h = heartbeat()
    beat(h, clock, times=5)
    assert h.settled()
    h.since = math.inf  # what a failed beat does
    beat(h, clock)
    assert not h.settled()
    beat(h, clock, times=4)
    assert h.settled()
    clock[0] += 1.5  # a beat overdue: over two thirds of a lease since the last answer
    assert not h.settled()
    beat(h, clock, every=1.0)  # answered after a silence of over a lease: a stalled server
    assert not h.settled()
    beat(h, clock, times=4)
    assert h.settled()
