"""Server-sent events keep a page current without reloading it, woken by Postgres
(LISTEN on every run's events, or on one run's), polling behind a transaction pooler.

Every stream of a dashboard process listens on the one connection its client shares
(``AsyncClient(shared_listening=True)``, see ``outlast.store.notify.Listener``), so open pages
hold no connection of the database's each. Each stream ends after ``OUTLAST_LIVE_SECONDS`` (the
browser opens a new one by itself), and one person holds ``OUTLAST_LIVE_STREAMS`` at most at once
(``Streams``): past it, a new one is refused with a 429."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from outlast.dashboard import web
from outlast.producer import AsyncClient

TICK = 1.0  # seconds between looks while Postgres cannot push (behind a pooler)
HEARTBEAT = 10.0  # seconds between looks while it pushes: to notice a page closed


class Streams:
    """The live streams open in this process, per person, so that one past ``most`` is refused.
    A stream counts from when it is accepted until it ends, and ``seconds`` (its life) at most:
    one whose response never started (its client gone at once) is not counted for ever."""

    def __init__(self, most: int, seconds: float) -> None:
        self.most = most
        self.seconds = seconds
        self._open: dict[str, dict[object, float]] = {}  # person -> their streams' ends

    def take(self, who: str) -> object | None:
        """A ticket for one more stream of ``who``, to give back when it ends; None: too many."""
        now = time.monotonic()
        mine = {t: end for t, end in self._open.get(who, {}).items() if end > now}
        self._open[who] = mine
        if len(mine) >= self.most:
            return None
        ticket = object()
        mine[ticket] = now + self.seconds + HEARTBEAT + TICK  # its last look may end a little late
        return ticket

    def give_back(self, who: str, ticket: object) -> None:
        mine = self._open.get(who, {})
        mine.pop(ticket, None)
        if not mine:
            self._open.pop(who, None)

    def refusal(self, who: str) -> str:
        return (
            f"too many live pages open: {who} may keep {self.most} at once in this dashboard process "
            "(OUTLAST_LIVE_STREAMS); close a dashboard page or tab, then reload this one"
        )


def _change(mark: int) -> str:
    return f"event: change\ndata: {json.dumps({'mark': mark})}\n\n"


async def _run_changes(
    c: AsyncClient, request: Request, run_id: str, seen: int, until: float
) -> AsyncIterator[str]:
    """A ``change`` whenever the run has events after ``seen``, as Postgres pushes them, until
    ``until`` (the browser then connects again); ``final`` once the run is final (the page stops
    listening)."""
    yield "retry: 2000\n\n"
    loop = asyncio.get_running_loop()
    async with c.watch_run(run_id, TICK) as watch:
        while loop.time() < until and not await request.is_disconnected():
            final = (await c.status(run_id)).final  # read before the events: none is missed
            events = await c.events(run_id, seen)
            if events:
                seen = int(events[-1]["id"])
                yield _change(seen)
            if final:
                yield "event: final\ndata: {}\n\n"
                return
            await watch.changed(timeout=min(HEARTBEAT, max(0.0, until - loop.time())))


async def _changes(c: AsyncClient, request: Request, seen: int, until: float) -> AsyncIterator[str]:
    """A ``change`` whenever the events' sequence moved, until ``until`` (the browser then
    connects again). Woken by Postgres (LISTEN on every run's events, 0020); first a ``mode``
    event says whether that works: behind a transaction pooler notifications do not arrive, and
    the stream polls every TICK seconds instead, which the page then says."""
    yield "retry: 2000\n\n"
    loop = asyncio.get_running_loop()
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


async def _held(streams: Streams, who: str, ticket: object, stream: AsyncIterator[str]) -> AsyncIterator[str]:
    try:
        async for chunk in stream:
            yield chunk
    finally:
        streams.give_back(who, ticket)


async def live(request: Request) -> Response:
    """Server-sent events: ``change`` whenever something happened (to the run, with ``?run=``)
    since ``after``, what the page showed: what happened before the stream opened counts too."""
    c, run_id = web.client_of(request), request.query_params.get("run")
    after = request.query_params.get("after", "")
    streams: Streams = request.app.state.streams
    until = asyncio.get_running_loop().time() + streams.seconds
    if run_id:
        events = await c.events(run_id)  # an unknown run: 404, before the stream starts
        seen = int(after) if _digits(after) else (int(events[-1]["id"]) if events else 0)
        stream = _run_changes(c, request, run_id, seen, until)
    else:
        seen = int(after) if _digits(after) else await c.change_mark()
        stream = _changes(c, request, seen, until)
    who = web.caller_of(request).principal.name
    ticket = streams.take(who)
    if ticket is None:
        headers = {"Retry-After": str(int(HEARTBEAT))}
        return JSONResponse({"error": streams.refusal(who)}, status_code=429, headers=headers)
    headers = {"Cache-Control": "no-store"}
    return StreamingResponse(
        _held(streams, who, ticket, stream), media_type="text/event-stream", headers=headers
    )


def _digits(text: str) -> bool:
    return text.isascii() and text.isdigit() and len(text) < 19
