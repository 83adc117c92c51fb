"""A slow Postgres, as a heartbeat judges it: ``store.slow`` once an episode, ``store.fast_again``
once after it; *slow* is over ``OUTLAST_SLOW_ROUND_TRIP`` or a tenth of the lease TTL, if less."""

from __future__ import annotations

from typing import Any

from structlog.testing import capture_logs

from outlast.settings import Settings
from outlast.worker.heartbeat import Heartbeat


def test_slow_is_the_setting_or_a_tenth_of_the_lease() -> None:
    assert Settings().slow_after == 0.1
    assert Settings(lease_ttl=0.5).slow_after == 0.05
    assert Settings(lease_ttl=60, slow_round_trip=0.3).slow_after == 0.3


def test_an_episode_of_slow_round_trips_is_logged_once_and_its_end_once() -> None:
    parts: Any = {"state": None, "leases": None, "fleet": None, "queue": None, "declared": []}
    h = Heartbeat(settings=Settings(lease_ttl=2.0), **parts)
    with capture_logs() as logs:
        for seconds in (0.05, 0.2, 0.3, 0.2, 0.04, 0.03, 0.15):
            h._judge(seconds)
    seen = [(e["event"], e["round_trip_ms"]) for e in logs]
    assert seen == [("store.slow", 200), ("store.fast_again", 40), ("store.slow", 150)]
    assert logs[0]["threshold_ms"] == 100 and "renewed every 0.667s" in logs[0]["risks"]
