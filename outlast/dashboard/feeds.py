"""This module serves what a run shows over HTTP.

It serves its state as JSON (``GET /api/runs/{id}/state``), its events as server-sent events
(``GET /api/runs/{id}/events``) and its live output as server-sent events
(``GET /api/runs/{id}/stream``). Every signed-in caller reads them (viewers included).

An event stream sends each event with its id (``id:``), so a browser's ``EventSource`` that
reconnects sends ``Last-Event-ID`` and goes on after it, missing nothing; ``?after=ID`` does the
same by hand. It ends with ``event: end`` once the run is final, or after ``OUTLAST_LIVE_SECONDS``
(the browser then connects again), and counts against the caller's ``OUTLAST_LIVE_STREAMS``.
A live-output stream sends ``chunk`` events (each with its id, for ``Last-Event-ID``), then
``result`` (the run's final record): chunks are at most once. It too ends after
``OUTLAST_LIVE_SECONDS`` and counts against ``OUTLAST_LIVE_STREAMS``."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from outlast._model import RunRecord
from outlast.dashboard import web
from outlast.dashboard.live import HEARTBEAT, TICK, Streams
from outlast.errors import OutlastError
from outlast.producer import AsyncClient


def _sse(kind: str, data: Any, event_id: object = None) -> str:
    said = f"id: {event_id}\n" if event_id is not None else ""
    return f"{said}event: {kind}\ndata: {json.dumps(data, default=str, ensure_ascii=False)}\n\n"


async def state(request: Request) -> Response:
    """The run's state: ``{"state": {key: {"value", "version", "seq"}}}``."""
    c, run_id = web.client_of(request), request.path_params["run_id"]
    try:
        values = await c.state(run_id)
    except OutlastError as exc:
        return JSONResponse({"error": str(exc)}, status_code=web.status_of(exc))
    shown = {k: {"value": v.value, "version": v.version, "seq": v.seq} for k, v in values.items()}
    return JSONResponse({"run_id": run_id, "state": shown})


async def _events(
    c: AsyncClient, request: Request, run_id: str, after: int, until: float
) -> AsyncIterator[str]:
    yield "retry: 2000\n\n"
    loop = asyncio.get_running_loop()
    async with c.watch_run(run_id, TICK) as watch:
        while loop.time() < until and not await request.is_disconnected():
            final = (await c.status(run_id)).final  # read before the events: none is missed
            for e in await c.events(run_id, after):
                after = int(e["id"])
                yield _sse("event", {**e, "at": e["at"].isoformat()}, after)
            if final:
                yield _sse("end", {"run_id": run_id})
                return
            await watch.changed(timeout=min(HEARTBEAT, max(0.0, until - loop.time())))


async def _chunks(
    c: AsyncClient, request: Request, run_id: str, after: str, until: float
) -> AsyncIterator[str]:
    """The run's chunks, then its result, until ``until`` (the browser then connects again,
    sending the last chunk's id): the same life as the other streams, within its ticket's."""
    yield "retry: 2000\n\n"
    loop = asyncio.get_running_loop()
    items = c.stream(run_id, after=after)
    try:
        while (left := until - loop.time()) > 0:
            try:  # a wait past the stream's life is cut short (the XREAD's connection is then closed)
                item = await asyncio.wait_for(anext(items), left)
            except (StopAsyncIteration, TimeoutError):
                return
            if await request.is_disconnected():
                return
            if isinstance(item, RunRecord):
                yield _sse("result", item.to_dict())
            else:
                yield _sse("chunk", {"data": item.data, "op": item.op}, item.id)
    finally:
        await items.aclose()


async def events(request: Request) -> Response:
    """The run's events as server-sent events, after ``Last-Event-ID`` or ``?after=``."""
    c, run_id = web.client_of(request), request.path_params["run_id"]
    after = request.headers.get("last-event-id") or request.query_params.get("after", "0")
    if not (after.isascii() and after.isdigit() and len(after) < 19):
        return JSONResponse({"error": "after (or Last-Event-ID) must be an event id, a whole number"}, 400)
    until = asyncio.get_running_loop().time() + request.app.state.streams.seconds
    return await _opened(request, run_id, _events(c, request, run_id, int(after), until))


async def stream(request: Request) -> Response:
    """The run's live output as server-sent events, then its result."""
    c, run_id = web.client_of(request), request.path_params["run_id"]
    after = request.headers.get("last-event-id") or request.query_params.get("after", "0")
    if not _entry_id(after):
        said = "after (or Last-Event-ID) must be a chunk's id, as the stream sent it (e.g. 0 or 1712-0)"
        return JSONResponse({"error": said}, 400)
    until = asyncio.get_running_loop().time() + request.app.state.streams.seconds
    return await _opened(request, run_id, _chunks(c, request, run_id, after, until))


def _entry_id(text: str) -> bool:
    """A Redis stream entry id Redis takes after XREAD: ``MS`` or ``MS-SEQ``, each under 2**64."""
    parts = text.split("-")
    return len(parts) <= 2 and all(re.fullmatch(r"[0-9]{1,20}", p) and int(p) < 1 << 64 for p in parts)


async def _opened(request: Request, run_id: str, feed: AsyncIterator[str]) -> Response:
    """The stream, once the run is known (404 before it starts) and the caller has room for it."""
    try:
        await web.client_of(request).status(run_id)
    except OutlastError as exc:
        return JSONResponse({"error": str(exc)}, status_code=web.status_of(exc))
    streams: Streams = request.app.state.streams
    who = web.caller_of(request).principal.name
    ticket = streams.take(who)
    if ticket is None:
        headers = {"Retry-After": str(int(HEARTBEAT))}
        return JSONResponse({"error": streams.refusal(who)}, status_code=429, headers=headers)

    async def held() -> AsyncIterator[str]:
        try:
            async for chunk in feed:
                yield chunk
        finally:
            streams.give_back(who, ticket)

    return StreamingResponse(held(), media_type="text/event-stream", headers={"Cache-Control": "no-store"})
