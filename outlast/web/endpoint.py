"""The callbacks endpoint: ``POST <base>/<token>``, with no account. A good token (signed with
``OUTLAST_SECRET_KEY``, bound to one run, one channel and an expiry: ``outlast.callbacks``) makes
the request's body a message on that channel of that run (JSON when it is sent as JSON, else its
text). The same delivery repeated (same token, same body), or the same ``Idempotency-Key`` header,
is one message. A bad token (expired, altered, foreign) is a 404 and nothing is stored; the body is
bounded (``OUTLAST_MAX_PAYLOAD``: 413). A response names no run and says nothing of any other."""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from outlast.callbacks import BadToken, verify
from outlast.errors import InvalidInput, MessageRefused
from outlast.settings import Settings

if TYPE_CHECKING:
    from outlast.producer import AsyncClient

# How a refusal of a good token is answered: the status, and words about this callback only.
_REFUSED = {
    "unknown": (404, "not a callback"),
    "final": (410, "this callback is closed"),
    "too_large": (413, "the body is too large"),
    "full": (429, "too many messages wait: try again later"),
}
MAX_KEY = 200  # characters of an Idempotency-Key


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
        s = client.settings
        try:
            bound = verify(s.secret_key, request.path_params["token"])
        except BadToken:
            return JSONResponse({"error": "not a callback"}, status_code=404)
        body = await _bounded(request, s.max_payload)
        if body is None:
            return JSONResponse({"error": "the body is too large"}, status_code=413)
        key = request.headers.get("idempotency-key")
        if key is not None and not (0 < len(key) <= MAX_KEY and key.isprintable()):
            return JSONResponse({"error": "a bad Idempotency-Key"}, status_code=400)
        delivery = key or hashlib.sha256(request.path_params["token"].encode() + b"\0" + body).hexdigest()
        try:
            payload = _payload(request, body)
            receipt = await client.send(
                bound.run_id, bound.channel, payload, f"callback:{delivery}", via="callback"
            )
        except MessageRefused as exc:
            status, said = _REFUSED.get(exc.refusal, (400, "refused"))
            return JSONResponse({"error": said}, status_code=status)
        except InvalidInput:
            return JSONResponse(
                {"error": "the body is not a valid message for this callback"}, status_code=422
            )
        return JSONResponse({"accepted": True, "duplicate": receipt.duplicate}, status_code=202)


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


def _payload(request: Request, body: bytes) -> Any:
    """JSON sent as JSON; any other body as its text."""
    text = body.decode("utf-8", errors="replace")
    if "json" in request.headers.get("content-type", ""):
        try:
            return json.loads(text)
        except ValueError:
            raise InvalidInput("not JSON") from None
    return text
