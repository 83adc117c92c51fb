"""Server-sent events: what keeps a page current without reloading it, woken by Postgres
(LISTEN on every run's events), polling behind a transaction pooler."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from outlast.dashboard import web
from outlast.producer import AsyncClient

LIVE_SECONDS = 300.0  # an event stream ends after this; the browser reconnects by itself
TICK = 1.0  # seconds between looks while Postgres cannot push (behind a pooler)
HEARTBEAT = 10.0  # seconds between looks while it pushes: to notice a page closed


def _change(mark: int) -> str:
    return f"event: change\ndata: {json.dumps({'mark': mark})}\n\n"


async def _run_changes(c: AsyncClient, run_id: str, after: int) -> AsyncIterator[str]:
    """A ``change`` for each event of the run after ``after``, as Postgres pushes them, then
    ``final`` once the run is final (the page stops listening)."""
    yield "retry: 2000\n\n"
    async for event in c.follow(run_id, after):
        yield _change(int(event["id"]))
    yield "event: final\ndata: {}\n\n"


async def _changes(c: AsyncClient, request: Request, seen: int) -> AsyncIterator[str]:
    """A ``change`` whenever the events' sequence moved, for LIVE_SECONDS (the browser then
    connects again). Woken by Postgres (LISTEN on every run's events, 0020); first a ``mode``
    event says whether that works: behind a transaction pooler notifications do not arrive, and
    the stream polls every TICK seconds instead, which the page then says."""
    yield "retry: 2000\n\n"
    loop = asyncio.get_running_loop()
    until = loop.time() + LIVE_SECONDS
    async with c.watch_runs(TICK) as watch:
        pushed = await watch.hears()
        yield f"event: mode\ndata: {'pushed' if pushed else 'polling'}\n\n"
        while loop.time() < until and not await request.is_disconnected():
            now = await c.change_mark()
            if now != seen:
                seen = now
                yield _change(now)
            if pushed:  # woken by a change; a look now and then notices a closed page
                await watch.changed(timeout=min(HEARTBEAT, max(0.0, until - loop.time())))
            else:
                await asyncio.sleep(TICK)


async def live(request: Request) -> Response:
    """Server-sent events: ``change`` whenever something happened (to the run, with ``?run=``)
    since ``after``, what the page showed: what happened before the stream opened counts too."""
    c, run_id = web.client_of(request), request.query_params.get("run")
    after = request.query_params.get("after", "")
    if run_id:
        events = await c.events(run_id)  # an unknown run: 404, before the stream starts
        seen = int(after) if _digits(after) else (int(events[-1]["id"]) if events else 0)
        stream = _run_changes(c, run_id, seen)
    else:
        stream = _changes(c, request, int(after) if _digits(after) else await c.change_mark())
    headers = {"Cache-Control": "no-store"}
    return StreamingResponse(stream, media_type="text/event-stream", headers=headers)


def _digits(text: str) -> bool:
    return text.isascii() and text.isdigit() and len(text) < 19
