"""This module signs a person in (a token from the users file, for a session cookie) and out."""

from __future__ import annotations

from urllib.parse import parse_qsl

from starlette.requests import Request
from starlette.responses import Response

from outlast.dashboard import web
from outlast.dashboard.auth import (
    LOGIN_BODY,
    LOGIN_COOKIE,
    LOGIN_FIELDS,
    SESSION_COOKIE,
    SESSION_SECONDS,
    Gate,
    same,
)
from outlast.dashboard.render import login_page, render


async def login(request: Request) -> Response:
    gate: Gate = request.app.state.gate
    if request.method == "GET":
        return await login_page(request)
    if not await gate.may_try(request):
        return await login_page(request, 429, "too many sign-in attempts from your address: wait a minute")
    try:
        body = await web.capped(request, LOGIN_BODY)
    except web.Refusal as exc:
        return await login_page(request, exc.status, f"refused: {exc} (a sign-in is a token)")
    try:
        form = dict(parse_qsl(body.decode("latin-1"), max_num_fields=LOGIN_FIELDS))
    except ValueError:  # more fields than that
        return await login_page(request, 400, "refused: a sign-in form is a token and its CSRF token")
    nonce = request.cookies.get(LOGIN_COOKIE, "")
    if not same(form.get("csrf", ""), await gate.login_csrf(nonce)):
        return await login_page(request, 403, "the sign-in form was stale: try again")
    sid = await gate.sign_in(form.get("token", "").strip())
    if sid is None:
        return await login_page(request, 401, "that token is not in the users file")
    response = web.see(request, "/")
    response.set_cookie(
        SESSION_COOKIE,
        sid,
        max_age=SESSION_SECONDS,
        httponly=True,
        samesite="strict",
        secure=gate.secure_cookies(request),
        path=web.base(request) or "/",
    )
    return response


async def logout(request: Request) -> Response:
    form = await web.form_of(request)
    if form is None:
        return render(request, "error.html", 403, error="the sign-out form was stale: try again")
    await request.app.state.gate.sign_out(request)
    response = web.see(request, "/login")
    response.delete_cookie(SESSION_COOKIE, path=web.base(request) or "/")
    return response
