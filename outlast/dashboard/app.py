"""The dashboard's ASGI app: authentication on every request, security headers, and the routes of
the pages (``pages.py``) and the JSON API (``api.py``), all reading and deciding through one
``AsyncClient``."""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Mount
from starlette.staticfiles import StaticFiles

from outlast.app import App
from outlast.dashboard.auth import LOGIN_COOKIE, NUL, Gate
from outlast.errors import OutlastError
from outlast.producer import AsyncClient
from outlast.settings import Settings

HERE = Path(__file__).parent
Next = Callable[[Request], Awaitable[Response]]
OPEN_PATHS = ("/login", "/static/")
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, default=str, sort_keys=True)


def _age(at: datetime | str | None) -> str:
    if at is None:
        return "-"
    when = datetime.fromisoformat(at) if isinstance(at, str) else at
    seconds = max(0.0, (datetime.now(UTC) - when).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:.0f}s"


def _left(seconds: float | None) -> str:
    if seconds is None:
        return "no expiry"
    if seconds <= 0:
        return "expired"
    return f"{seconds / 60:.0f} min" if seconds >= 60 else f"{seconds:.0f} s"


def _segment(value: Any) -> str:
    """An id as one URL path segment: every character but letters, digits and ``-_.~`` encoded,
    ``/`` and ``?`` included, so an id can never point a link or a form at another path."""
    return quote(str(value), safe="")


def templates() -> Environment:
    env = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
    )
    env.filters |= {"pretty": _pretty, "age": _age, "left": _left, "seg": _segment}
    return env


def render(request: Request, name: str, status: int = 200, **context: Any) -> HTMLResponse:
    """A page, with who is signed in and the CSRF token its forms carry."""
    caller = getattr(request.state, "caller", None)
    page = request.app.state.templates.get_template(name)
    base = request.scope.get("root_path", "")
    html = page.render(base=base, caller=caller, csrf=caller.csrf if caller else None, **context)
    return HTMLResponse(html, status_code=status)


async def login_page(request: Request, status: int = 200, error: str | None = None) -> HTMLResponse:
    """The sign-in form; its CSRF token is bound to a nonce in a cookie of its own."""
    gate: Gate = request.app.state.gate
    nonce = request.cookies.get(LOGIN_COOKIE) or secrets.token_urlsafe(16)
    response = render(
        request,
        "login.html",
        status,
        login_csrf=await gate.login_csrf(nonce),
        error=error,
        no_users=gate.users is None and gate.header is None,
    )
    response.set_cookie(
        LOGIN_COOKIE,
        nonce,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path=request.scope.get("root_path", "") + "/login",
    )
    return response


class Guard(BaseHTTPMiddleware):
    """Every response gets the security headers; every request but the sign-in page and the
    static files must come from someone authenticated (401 otherwise: JSON for the API, the
    sign-in form for a page)."""

    async def dispatch(self, request: Request, call_next: Next) -> Response:
        path = request.url.path[len(request.scope.get("root_path", "")) :] or "/"
        response: Response
        if "\x00" in request.scope["path"] or any(
            "\x00" in k + v for k, v in request.query_params.multi_items()
        ):
            response = JSONResponse({"error": NUL}, status_code=400)
        elif path.startswith(OPEN_PATHS):
            response = await call_next(request)
        else:
            response = await self._authenticated(request, path, call_next)
        response.headers["Content-Security-Policy"] = CSP
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
        response.headers["X-Frame-Options"] = "DENY"
        response.headers.setdefault("Cache-Control", "no-store")
        return response

    async def _authenticated(self, request: Request, path: str, call_next: Next) -> Response:
        try:
            caller = await request.app.state.gate.caller(request)
        except OutlastError as exc:  # Postgres unreachable: the sessions are kept there
            return JSONResponse({"error": str(exc)}, status_code=503)
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


async def refused(request: Request, exc: Exception) -> Response:
    """An outlast refusal or an unreachable server, said in one line (JSON for the API)."""
    from outlast.dashboard.api import status_of

    status = status_of(exc) if isinstance(exc, OutlastError) else 500
    if request.url.path.startswith(request.scope.get("root_path", "") + "/api/"):
        return JSONResponse({"error": str(exc)}, status_code=status)
    return render(request, "error.html", status, error=str(exc))


def create_app(
    settings: Settings | None = None, *, app: App | None = None, client: AsyncClient | None = None
) -> Starlette:
    """The dashboard and its API as one ASGI app, to serve (``outlast dashboard``) or to mount
    in an application's own ASGI app (``Mount("/outlast", create_app(settings))``). With the
    ``app``, revised arguments are checked against the tool's signature before they are accepted."""
    from outlast.dashboard import api, pages

    s = settings or Settings.from_env()
    c = client or AsyncClient(settings=s, app=app)

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        yield
        await c.close()

    routes: list[BaseRoute] = [
        *pages.routes(),
        *api.routes(),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    site = Starlette(
        routes=routes,
        middleware=[Middleware(Guard)],
        exception_handlers={OutlastError: refused},
        lifespan=lifespan,
    )
    site.state.client = c
    site.state.gate = Gate(s, c)
    site.state.templates = templates()
    return site
