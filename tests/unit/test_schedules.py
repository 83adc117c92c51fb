"""Schedules' ticks without a server: catch-up after downtime, daylight saving time (cronsim's
semantics, in Europe/Paris), tick run ids, and declarations refused at once."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from outlast import App
from outlast._schedules import MAX_TICKS, due_ticks, latest_tick, run_id

PARIS = ZoneInfo("Europe/Paris")


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]


def test_catch_up_after_three_hours_down() -> None:
    last, now = utc(2026, 12, 1, 9, 0), utc(2026, 12, 1, 12, 0, 30)
    ticks, new = due_ticks("0 * * * *", "UTC", "all", last, now)
    assert ticks == [utc(2026, 12, 1, 10), utc(2026, 12, 1, 11), utc(2026, 12, 1, 12)] and new == ticks[-1]
    assert due_ticks("0 * * * *", "UTC", "latest", last, now) == (
        [utc(2026, 12, 1, 12)],
        utc(2026, 12, 1, 12),
    )
    # on time (30 s late): 'none' enqueues it; 2 minutes late it was missed, and skipped
    assert due_ticks("0 * * * *", "UTC", "none", last, now) == ([utc(2026, 12, 1, 12)], utc(2026, 12, 1, 12))
    assert due_ticks("0 * * * *", "UTC", "none", last, now + timedelta(minutes=2)) == (
        [],
        utc(2026, 12, 1, 12),
    )


def test_nothing_is_due_before_the_next_tick_and_all_is_bounded_per_pass() -> None:
    last = utc(2026, 12, 1, 9, 0)
    assert due_ticks("0 * * * *", "UTC", "all", last, utc(2026, 12, 1, 9, 59, 59)) == ([], last)
    ticks, new = due_ticks("* * * * *", "UTC", "all", last, utc(2026, 12, 2))
    assert len(ticks) == MAX_TICKS and new == ticks[-1]
    assert due_ticks("* * * * *", "UTC", "all", new, new + timedelta(minutes=1))[0] == [
        new + timedelta(minutes=1)
    ]


def test_a_tick_exactly_now_is_due() -> None:
    now = utc(2026, 12, 1, 10, 0, 0)
    assert latest_tick("0 * * * *", "UTC", now) == now
    assert due_ticks("0 * * * *", "UTC", "latest", now - timedelta(hours=1), now) == ([now], now)


def test_spring_forward_a_daily_tick_in_the_skipped_hour_runs_once_at_three() -> None:
    # 2026-03-29 in Paris: 02:00 CET becomes 03:00 CEST; 02:30 does not exist that day
    last = datetime(2026, 3, 28, 12, 0, tzinfo=PARIS)
    now = datetime(2026, 3, 30, 12, 0, tzinfo=PARIS)
    ticks, _ = due_ticks("30 2 * * *", "Europe/Paris", "all", last, now)
    assert [t.astimezone(UTC) for t in ticks] == [utc(2026, 3, 29, 1, 0), utc(2026, 3, 30, 0, 30)]
    assert run_id("nightly", ticks[0]) == "nightly@2026-03-29T01:00:00Z"


def test_fall_back_a_daily_tick_in_the_repeated_hour_runs_once_and_half_hourly_runs_every_half_hour() -> None:
    # 2026-10-25 in Paris: 03:00 CEST becomes 02:00 CET; 02:30 happens twice
    last = datetime(2026, 10, 24, 12, 0, tzinfo=PARIS)
    now = datetime(2026, 10, 25, 12, 0, tzinfo=PARIS)
    ticks, _ = due_ticks("30 2 * * *", "Europe/Paris", "all", last, now)
    assert [t.astimezone(UTC) for t in ticks] == [utc(2026, 10, 25, 0, 30)]
    start = utc(2026, 10, 24, 23, 0)  # 01:00 in Paris
    half, _ = due_ticks("*/30 * * * *", "Europe/Paris", "all", start, start + timedelta(hours=4))
    gaps = {b - a for a, b in itertools.pairwise(half)}
    assert len(half) == 8 and gaps == {timedelta(minutes=30)}  # real time: 4 h, both 02:30s
    assert len({run_id("h", t) for t in half}) == 8


def test_declarations_are_refused_at_once() -> None:
    app = App()

    @app.workflow("w")
    async def w(run: object) -> None:
        pass

    with pytest.raises(ValueError, match="cron expression"):
        app.schedule("61 * * * *", workflow="w")
    with pytest.raises(ValueError, match="unknown time zone"):
        app.schedule("* * * * *", workflow="w", tz="Mars/Olympus")
    with pytest.raises(ValueError, match="catch_up"):
        app.schedule("* * * * *", workflow="w", catch_up="some")  # type: ignore[arg-type]
    app.schedule("* * * * *", workflow="w")
    with pytest.raises(ValueError, match="declared twice"):
        app.schedule("0 * * * *", workflow="w")
    with pytest.raises(TypeError, match=r"above @app\.workflow"):

        @app.schedule("* * * * *", name="x")
        async def not_a_workflow(run: object) -> None:
            pass
