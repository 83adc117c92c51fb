"""The dashboard's ASGI app reads and decides through one ``AsyncClient``. It brings together
authentication on every request, security headers, and the routes of the pages (``pages.py``) and
the JSON API (``api.py``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import structlog
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from outlast.app import App
from outlast.dashboard import api, charts, pages
from outlast.dashboard.api import status_of
from outlast.dashboard.auth import NUL, Gate
from outlast.dashboard.live import Streams
from outlast.dashboard.openapi import DESCRIBED
from outlast.dashboard.render import HERE, login_page, render, templates
from outlast.errors import OutlastError
from outlast.producer import AsyncClient
from outlast.settings import Settings
from outlast.web.endpoint import Callbacks

log = structlog.get_logger("outlast.dashboard")

Next = Callable[[Request], Awaitable[Response]]
OPEN_PATHS = ("/login", "/static/", "/callbacks/")  # a callback carries its own signed token
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
HSTS_SECONDS = 365 * 86400
UNAVAILABLE = "the dashboard cannot answer now: try again later (its log says why)"
FAILED = "the dashboard failed to answer this request: its log says why"


class Guard(BaseHTTPMiddleware):
    """Every response gets the security headers, a failure of the dashboard's own too (a 500
    said in one line, its traceback logged); every request but the sign-in page and the static
    files must come from someone authenticated (401 otherwise: JSON for the API, the sign-in form
    for a page)."""

    async def dispatch(self, request: Request, call_next: Next) -> Response:
        path = request.url.path[len(request.scope.get("root_path", "")) :] or "/"
        response: Response
        try:
            if "\x00" in request.scope["path"] or any(
                "\x00" in k + v for k, v in request.query_params.multi_items()
            ):
                response = JSONResponse({"error": NUL}, status_code=400)
            elif path.startswith(OPEN_PATHS):
                response = await call_next(request)
            else:
                response = await self._authenticated(request, path, call_next)
        except Exception:  # a failure of the dashboard's own: said as one, with the headers below
            log.exception("dashboard.failed", path=path)
            response = JSONResponse({"error": FAILED}, status_code=500)
        response.headers["Content-Security-Policy"] = CSP
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
        response.headers["X-Frame-Options"] = "DENY"
        response.headers.setdefault("Cache-Control", "no-store")
        if request.app.state.gate.always_secure:  # only HTTPS reaches it: browsers are told so
            response.headers["Strict-Transport-Security"] = f"max-age={HSTS_SECONDS}"
        return response

    async def _authenticated(self, request: Request, path: str, call_next: Next) -> Response:
        try:
            caller = await request.app.state.gate.caller(request)
        except OutlastError as exc:  # Postgres unreachable: the sessions are kept there
            return JSONResponse({"error": withheld(exc)}, status_code=503)
        if caller is None:
            return await self._refuse(request, path)
        request.state.caller = caller
        return await call_next(request)

    async def _refuse(self, request: Request, path: str) -> Response:
        if path.startswith("/api/") or "text/html" not in request.headers.get("accept", ""):
            return JSONResponse(
                {"error": "not authenticated: send Authorization: Bearer <token> (outlast users add)"},
                status_code=401,
                headers={"WWW-Authenticate": "Bearer"},
            )
        return await login_page(request, 401)


def withheld(exc: Exception) -> str:
    """What a caller who is not signed in is told of the dashboard's own failure: only that it
    cannot answer. The reason can name the database's URL, host and indexes; it is logged."""
    log.error("dashboard.unavailable", error=str(exc))
    return UNAVAILABLE


async def refused(request: Request, exc: Exception) -> Response:
    """An outlast refusal or an unreachable server, said in one line (JSON for the API); the
    dashboard's own failures in full only to a signed-in caller."""
    status = status_of(exc) if isinstance(exc, OutlastError) else 500
    signed_in = getattr(request.state, "caller", None) is not None
    said = str(exc) if status < 500 or signed_in else withheld(exc)
    if request.url.path.startswith(request.scope.get("root_path", "") + "/api/"):
        return JSONResponse({"error": said}, status_code=status)
    return render(request, "error.html", status, error=said)


async def unrouted(request: Request, exc: Exception) -> Response:
    """A URL no route takes (404), or not with this method (405): under the described paths, said
    as every refusal of the API is, ``{"error": ...}``; a page's, as plain text."""
    assert isinstance(exc, HTTPException)
    path = request.url.path[len(request.scope.get("root_path", "")) :]
    if not path.startswith(DESCRIBED):
        return PlainTextResponse(exc.detail, status_code=exc.status_code, headers=exc.headers)
    said = f"{request.method} is not taken here" if exc.status_code == 405 else "no route takes this URL"
    error = f"{said}: the routes are in GET /api/openapi.json (a path parameter holding / or a newline?)"
    return JSONResponse({"error": error}, status_code=exc.status_code, headers=exc.headers)


def create_app(
    settings: Settings | None = None, *, app: App | None = None, client: AsyncClient | None = None
) -> Starlette:
    """The dashboard and its API as one ASGI app, to serve (``outlast dashboard``) or to mount
    in an application's own ASGI app (``Mount("/outlast", create_app(settings))``). With the
    ``app``, revised arguments are checked against the tool's signature before they are accepted."""
    s = settings or Settings.from_env()
    c = client or AsyncClient(settings=s, app=app, shared_listening=True)  # one LISTEN connection

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        yield
        await c.close()

    routes: list[BaseRoute] = [
        *pages.routes(),
        *api.routes(),
        *charts.routes(),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
        Route("/callbacks/{token}", Callbacks(c).post, methods=["POST"]),  # outlast.web.callbacks, here too
    ]
    site = Starlette(
        routes=routes,
        middleware=[Middleware(Guard)],
        exception_handlers={OutlastError: refused, HTTPException: unrouted},
        lifespan=lifespan,
    )
    site.state.client = c
    site.state.gate = Gate(s, c)
    site.state.streams = Streams(s.live_streams, s.live_seconds)
    site.state.templates = templates()
    return site
