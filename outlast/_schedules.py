"""A schedule enqueues a workflow at the ticks of a cron expression, in a time zone.

The ticks (and what happens at a change of daylight saving time) are cronsim's: a tick that falls
in the hour skipped in spring runs once, at the first minute after it (02:30 -> 03:00); one in the
hour repeated in autumn runs once, at its first occurrence; expressions that run every minute or
every hour keep running every minute or hour of real time. A tick's run id is derived from the
schedule's name and the tick's instant, so a tick is one run however many workers enqueue it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from outlast._journal import canonical

CatchUp = Literal["latest", "none", "all"]
CATCH_UPS: tuple[CatchUp, ...] = ("latest", "none", "all")
ON_TIME = 60.0  # seconds: a tick first seen later than this was missed (catch_up="none" skips it)
MAX_TICKS = 100  # ticks one pass enqueues for one schedule with catch_up="all"; the next goes on


MAX_NAME = 170  # NAME@2026-12-01T01:30:00Z and NAME@trigger-<12 hex> fit in 200 characters


@dataclass(frozen=True)
class Schedule:
    """A ``Schedule`` is a schedule as declared with ``@app.schedule``. It enqueues ``workflow``
    with ``input`` on ``queue`` (None: the worker's default queue) at every tick of ``cron`` in
    ``tz``; ``catch_up`` says which ticks missed while no worker was up are enqueued: the latest,
    none, or all."""

    name: str
    cron: str
    workflow: str
    tz: str = "UTC"
    input: dict[str, Any] = field(default_factory=dict)
    catch_up: CatchUp = "latest"
    queue: str | None = None

    def __post_init__(self) -> None:
        if not 0 < len(self.name) <= MAX_NAME:  # its runs' ids (NAME@tick) must stay run ids
            raise ValueError(f"schedule name {self.name[:40]!r}: 1 to {MAX_NAME} characters, please")
        zone(self.tz, self.name)
        try:
            CronSim(self.cron, datetime.now(ZoneInfo(self.tz)))
        except CronSimError as exc:
            raise ValueError(
                f"schedule {self.name!r}: cron expression {self.cron!r} is refused: {exc}"
            ) from None
        canonical(self.input)  # a JSON object, or InvalidInput saying why not
        if self.catch_up not in CATCH_UPS:
            raise ValueError(
                f"schedule {self.name!r}: catch_up must be one of {CATCH_UPS}, got {self.catch_up!r}"
            )


def zone(tz: str, name: str) -> ZoneInfo:
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"schedule {name!r}: unknown time zone {tz!r} (an IANA name such as Europe/Paris)"
        ) from None


# Ticks are returned in UTC: two aware datetimes of one ZoneInfo compare and subtract by their
# wall clocks, which is wrong across a change of daylight saving time.


def next_tick(cron: str, tz: str, after: datetime) -> datetime:
    """The first tick strictly after ``after``, in UTC."""
    found: datetime = next(CronSim(cron, after.astimezone(ZoneInfo(tz))))
    return found.astimezone(UTC)


def latest_tick(cron: str, tz: str, until: datetime) -> datetime:
    """The last tick at or before ``until``, in UTC."""
    # cronsim counts a reversed start with microseconds as a tick of its own second: 1 µs makes
    # the second of ``until`` itself a candidate.
    found: datetime = next(CronSim(cron, until.astimezone(ZoneInfo(tz)).replace(microsecond=1), reverse=True))
    return found.astimezone(UTC)


def due_ticks(
    cron: str, tz: str, catch_up: str, last: datetime, now: datetime
) -> tuple[list[datetime], datetime]:
    """The ticks after ``last`` (the newest handled) and up to ``now`` to enqueue, and the newest
    tick handled after them (the schedule's next ``last``)."""
    first = next_tick(cron, tz, last)
    if first > now:
        return [], last
    if catch_up == "all":
        ticks = [first]
        while len(ticks) < MAX_TICKS and (tick := next_tick(cron, tz, ticks[-1])) <= now:
            ticks.append(tick)
        return ticks, ticks[-1]
    latest = latest_tick(cron, tz, now)
    if catch_up == "none" and now - latest > timedelta(seconds=ON_TIME):
        return [], latest
    return [latest], latest


def run_id(name: str, tick: datetime) -> str:
    """The id of a tick's run: the schedule's name and the tick's instant in UTC."""
    return f"{name}@{tick.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ}"
