"""``Callbacks`` serves the callbacks endpoint, ``POST <base>/<token>``, with no account. A good
token (signed with ``OUTLAST_SECRET_KEY``, bound to one run, one channel and an expiry:
``outlast._callbacks``) makes the request's body a message on that channel of that run (JSON when it
is sent as JSON, else its text). The same delivery repeated (same token, same body), or the same
``Idempotency-Key`` header, is one message. A bad token (expired, altered, foreign) is a 404 and
nothing is stored; the body is bounded (``OUTLAST_MAX_REFERENCED``: 413; past
``OUTLAST_MAX_PAYLOAD`` it is held by reference, as ``client.send``'s payload). A response names
no run and says nothing of any other."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from outlast._callbacks import deliver
from outlast.settings import Settings

if TYPE_CHECKING:
    from outlast.producer import AsyncClient


class Callbacks:
    """The endpoint as an ASGI app; ``client`` (or one made from ``settings``, else from the
    environment, at the first request) stores the messages."""

    def __init__(self, client: AsyncClient | None = None, *, settings: Settings | None = None) -> None:
        self._client = client
        self._made: AsyncClient | None = None  # the client made here, closed at shutdown
        self._settings = settings

        @asynccontextmanager
        async def lifespan(_: Starlette) -> AsyncIterator[None]:
            yield
            if self._made is not None:
                made, self._made, self._client = self._made, None, None
                await made.close()

        self._app = Starlette(routes=[Route("/{token}", self.post, methods=["POST"])], lifespan=lifespan)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._app(scope, receive, send)

    def client(self) -> AsyncClient:
        if self._client is None:
            from outlast.producer import AsyncClient

            self._client = self._made = AsyncClient(settings=self._settings or Settings.from_env())
        return self._client

    async def post(self, request: Request) -> Response:
        """One delivery (a route of its own where this is not mounted: the dashboard's)."""
        client = self.client()
        token = request.path_params["token"]
        body = await _bounded(request, client.settings.max_referenced)  # past max_payload: by reference
        if body is None:
            return JSONResponse({"error": "the body is too large"}, status_code=413)
        status, answer = await deliver(
            client,
            token,
            body,
            request.headers.get("content-type", ""),
            request.headers.get("idempotency-key"),
        )
        return JSONResponse(answer, status_code=status)


async def _bounded(request: Request, limit: int) -> bytes | None:
    """The body, or None once it is over ``limit`` bytes (never read further)."""
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        return None
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            return None
    return bytes(body)
