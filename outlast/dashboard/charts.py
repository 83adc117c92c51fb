"""The charts page (``/charts``) and ``/api/charts`` show recent figures of runs, queues and tools.
Runs started, finished and failed per minute, each queue's depth and oldest entry's age, and each
tool's p50 and p95 operation latency over the last hour and day, drawn as SVG on the server (no
script, no library, nothing fetched elsewhere).

Everything comes from the rollup the workers' sweepers keep once a minute (``AsyncClient.charts``;
``outlast/worker/rollup.py``): a view reads at most a day of minutes x (1 + queues + tools) rows,
whatever the number of runs, and nothing is written on any run's or operation's path for it.
Every signed-in principal may look (the viewer role)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from html import escape
from typing import Any

from markupsafe import Markup
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from outlast._latency import BOUNDS
from outlast.dashboard.api import client_of, status_of
from outlast.dashboard.render import render
from outlast.errors import OutlastError

WINDOWS = {"hour": 3600.0, "day": 86400.0, "week": 7 * 86400.0}  # what a chart of runs and queues covers
POINTS = 1440  # at most, per line: a week's minutes are drawn as the mean of every 7
WIDTH, HEIGHT, LEFT, RIGHT, TOP, BOTTOM = 960, 180, 64, 16, 12, 22
SERIES = 8  # colours (style.css: .s0 .. .s7); a ninth series takes the first again
Point = tuple[datetime, float]


def seconds_text(value: float | None) -> str:
    """A latency or an age for a person: ms under a second, s under a minute, then min."""
    if value is None:
        return "-"
    if value < 1:
        return f"{value * 1000:.3g} ms"
    if value < 60:
        return f"{value:.3g} s"
    return f"{value / 60:.3g} min"


def _number(value: float) -> str:
    return f"{value:.0f}" if value == int(value) else f"{value:.3g}"


def _ceiling(value: float) -> float:
    """The top of a chart's scale: 1, 2 or 5 times a power of ten, at least ``value``."""
    if value <= 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(value))
    return next(m * power for m in (1.0, 2.0, 5.0, 10.0) if m * power >= value)


def lines(
    label: str,
    series: Mapping[str, Sequence[Point]],
    start: datetime,
    end: datetime,
    legend: Mapping[str, str],
) -> str:
    """One chart: a line per series over ``start``..``end`` (broken where a minute is missing),
    its scale from 0, the legend's text per series (escaped, as every label). A line of more than
    ``POINTS`` minutes is drawn through the mean of each run of ``group`` minutes."""
    group = max(1, math.ceil((end - start).total_seconds() / 60 / POINTS))
    series = {name: _binned(points, group) for name, points in series.items()}
    top = _ceiling(max((v for points in series.values() for _, v in points), default=0.0))
    span = max((end - start).total_seconds(), 1.0)
    inner_w, inner_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def xy(at: datetime, value: float) -> tuple[str, str]:
        x = LEFT + (at - start).total_seconds() / span * inner_w
        return f"{x:.1f}", f"{TOP + inner_h - value / top * inner_h:.1f}"

    rows = max(len(series), 1)
    height = HEIGHT + 16 * rows
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" role="img" aria-label="{escape(label)}">',
        f'<line class="axis" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{TOP + inner_h}" y2="{TOP + inner_h}"/>',
        f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{TOP}" y2="{TOP}"/>',
        f'<text class="axis" x="{LEFT - 6}" y="{TOP + 4}" text-anchor="end">{_number(top)}</text>',
        f'<text class="axis" x="{LEFT - 6}" y="{TOP + inner_h + 4}" text-anchor="end">0</text>',
        f'<text class="axis" x="{LEFT}" y="{HEIGHT - 6}">{start:%Y-%m-%d %H:%M}</text>',
        f'<text class="axis" x="{WIDTH - RIGHT}" y="{HEIGHT - 6}" text-anchor="end">{end:%H:%M} UTC</text>',
    ]
    for i, (name, points) in enumerate(series.items()):
        colour = f"s{i % SERIES}"
        for run in _unbroken(points, group):
            if len(run) == 1:
                cx, cy = xy(*run[0])
                out.append(f'<circle class="{colour}" cx="{cx}" cy="{cy}" r="2"/>')
            else:
                path = " ".join(",".join(xy(at, v)) for at, v in run)
                out.append(f'<polyline class="{colour}" points="{path}"/>')
        ly = HEIGHT + 16 * i + 10
        out.append(
            f'<g class="legend"><rect class="{colour}" x="{LEFT}" y="{ly - 8}" width="10" height="10"/>'
            f'<text x="{LEFT + 16}" y="{ly + 1}">{escape(legend.get(name, name))}</text></g>'
        )
    out.append("</svg>")
    return "\n".join(out)


def _binned(points: Sequence[Point], group: int) -> list[Point]:
    """The mean of each ``group`` minutes' points (a rate per minute stays one), at the group's start."""
    if group == 1:
        return list(points)
    bins: dict[datetime, list[float]] = {}
    for at, v in points:
        minute = int(at.timestamp() // 60)
        bins.setdefault(datetime.fromtimestamp((minute - minute % group) * 60, UTC), []).append(v)
    return [(at, sum(vs) / len(vs)) for at, vs in bins.items()]


def _unbroken(points: Sequence[Point], group: int) -> list[list[Point]]:
    """The points in runs of consecutive minutes (bins): one missing (no rollup then) is a gap."""
    runs: list[list[Point]] = []
    for at, v in points:
        if runs and at - runs[-1][-1][0] <= timedelta(seconds=90 * group):
            runs[-1].append((at, v))
        else:
            runs.append([(at, v)])
    return runs


def latency_bars(latency: Sequence[Mapping[str, Any]]) -> str:
    """Each tool's p50 and p95 over the last hour and the last day as bars on a log scale (1 ms to
    the histogram's last bound), the figures written beside them."""
    if not latency:
        return ""
    low, high = math.log10(BOUNDS[0]), math.log10(BOUNDS[-1])
    bar_w = WIDTH - 260 - 250

    def width(seconds: float | None) -> float:
        if seconds is None:
            return 0.0
        return max(2.0, (math.log10(max(seconds, BOUNDS[0])) - low) / (high - low) * bar_w)

    height = 28 + 20 * 2 * len(latency)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart latency" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" role="img" aria-label="operation latency per tool">',
        f'<text class="axis" x="260" y="14">{seconds_text(BOUNDS[0])}</text>',
        f'<text class="axis" x="{260 + bar_w}" y="14" text-anchor="end">'
        f"{seconds_text(BOUNDS[-1])} (log scale)</text>",
    ]
    y = 24
    for t in latency:
        for window in ("hour", "day"):
            s = t[window]
            name = escape(t["tool"][:30])
            out.append(f'<text class="label" x="4" y="{y + 13}">{name} · last {window}</text>')
            out.append(f'<rect class="p95" x="260" y="{y + 3}" width="{width(s["p95"]):.1f}" height="14"/>')
            out.append(f'<rect class="p50" x="260" y="{y + 3}" width="{width(s["p50"]):.1f}" height="14"/>')
            said = (
                f"p50 {seconds_text(s['p50'])} · p95 {seconds_text(s['p95'])} · {s['operations']} operations"
            )
            out.append(f'<text class="figure" x="{270 + bar_w}" y="{y + 13}">{escape(said)}</text>')
            y += 20
    out.append("</svg>")
    return "\n".join(out)


def _window(request: Request) -> str:
    window = request.query_params.get("window", "hour")
    if window not in WINDOWS:
        raise ValueError(f"window must be one of {', '.join(WINDOWS)}, got {window[:40]!r}")
    return window


def drawn(view: Mapping[str, Any], now: datetime) -> dict[str, Markup]:
    """The charts of a view (``AsyncClient.charts``), as SVG markup (every label escaped)."""
    start = now - timedelta(seconds=view["seconds"])
    runs = view["runs"]
    series = {k: [(r["minute"], float(r[k])) for r in runs] for k in ("started", "finished", "failed")}
    legend = {k: f"{k}: {sum(int(r[k]) for r in runs)} in the window" for k in series}
    queues = view["queues"]
    depth = {q: [(s["minute"], float(s["depth"])) for s in samples] for q, samples in queues.items()}
    age = {q: [(s["minute"], float(s["oldest_age"])) for s in samples] for q, samples in queues.items()}
    last = {q: samples[-1] for q, samples in queues.items()}
    depths = {q: f"{q}: {s['depth']} (last sample)" for q, s in last.items()}
    ages = {q: f"{q}: {seconds_text(s['oldest_age'])} (last sample)" for q, s in last.items()}
    return {
        "runs": Markup(lines("runs per minute", series, start, now, legend)),
        "depth": Markup(lines("queue depth", depth, start, now, depths)),
        "age": Markup(lines("oldest entry's age (seconds)", age, start, now, ages)),
        "latency": Markup(latency_bars(view["latency"])),
    }


def _jsonable(value: Any) -> Any:
    def text(v: Any) -> str:
        return v.isoformat() if isinstance(v, datetime) else str(v)

    return json.loads(json.dumps(value, default=text))


async def charts_page(request: Request) -> Response:
    try:
        window = _window(request)
    except ValueError as exc:
        return render(request, "error.html", 400, error=str(exc))
    view = await client_of(request).charts(WINDOWS[window])
    now = datetime.now(UTC)
    svg = drawn(view, now)
    page: dict[str, Any] = {"windows": list(WINDOWS), "v": view, "svg": svg, "seconds": seconds_text}
    return render(request, "charts.html", window=window, **page)


async def charts_api(request: Request) -> Response:
    """``GET /api/charts?window=hour|day``: ``AsyncClient.charts``, times in ISO 8601."""
    try:
        window = _window(request)
        view = await client_of(request).charts(WINDOWS[window])
    except ValueError as exc:
        return JSONResponse({"error": str(exc)}, status_code=400)
    except OutlastError as exc:
        return JSONResponse({"error": str(exc)}, status_code=status_of(exc))
    return JSONResponse(_jsonable({"window": window, **view}))


def routes() -> list[BaseRoute]:
    return [Route("/charts", charts_page, name="charts"), Route("/api/charts", charts_api)]
