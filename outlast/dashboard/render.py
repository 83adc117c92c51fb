"""This module makes the dashboard's pages: the templates, their filters, a page with who is signed in
and its CSRF token, and the sign-in form."""

from __future__ import annotations

import json
import secrets
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse

from outlast._status import size_line
from outlast.dashboard.auth import LOGIN_COOKIE, Gate

HERE = Path(__file__).parent


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
    env.filters |= {"pretty": _pretty, "age": _age, "left": _left, "seg": _segment, "size": size_line}
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
        secure=gate.secure_cookies(request),
        path=request.scope.get("root_path", "") + "/login",
    )
    return response
