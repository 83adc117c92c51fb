"""Who is asking: every request to the dashboard and its API is authenticated.

Three ways in, checked in this order: the trusted header (``OUTLAST_AUTH_HEADER``, believed only
from ``OUTLAST_TRUSTED_PROXIES``), a bearer token listed in the users file, or a session made by
signing in with such a token (an HttpOnly, SameSite=Strict cookie naming a session kept here, in
memory: a restart signs everyone out, and nothing else is lost). A form carries a CSRF token bound
to its session (or to the proxy's user); a bearer token needs none, a browser never sends it by
itself. Sign-ins are limited per client address.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from starlette.requests import Request

from outlast.errors import ConfigError
from outlast.identity import Principal, Users, check_principal_name, trusted
from outlast.settings import Settings

SESSION_COOKIE = "outlast_session"
LOGIN_COOKIE = "outlast_login"
SESSION_SECONDS = 8 * 3600
LOGIN_TRIES = 5  # per client address ...
LOGIN_WINDOW = 60.0  # ... per this many seconds
LOOPBACK = ("127.0.0.1", "::1", "localhost")


@dataclass(frozen=True)
class Session:
    principal: Principal
    expires: float


@dataclass(frozen=True)
class Caller:
    """An authenticated request: who, and the CSRF token its forms must carry (None: a bearer
    token, which needs none)."""

    principal: Principal
    csrf: str | None


def check_bind(host: str, settings: Settings) -> None:
    """Refuse to serve beyond this machine when nobody could be authenticated."""
    if host not in LOOPBACK and not settings.users and not settings.auth_header:
        raise ConfigError(
            f"the dashboard will not listen on {host} without users: set OUTLAST_USERS (make one "
            "with outlast users add NAME --group ops) or OUTLAST_AUTH_HEADER behind a proxy, "
            "or use --host 127.0.0.1"
        )


class Gate:
    """The users file, the sessions, the sign-in limit and the CSRF key of one dashboard process."""

    def __init__(self, settings: Settings) -> None:
        self.users = Users.load(Path(settings.users)) if settings.users else None
        self.header = settings.auth_header
        self.proxies = [p.strip() for p in settings.trusted_proxies.split(",") if p.strip()]
        self._key = secrets.token_bytes(32)  # per process: its sessions and CSRF tokens die with it
        self._sessions: dict[str, Session] = {}
        self._tries: dict[str, deque[float]] = {}

    def where(self, request: Request) -> str:
        """The client's address: the proxy's forwarded one when the proxy is trusted."""
        peer = request.client.host if request.client else ""
        forwarded = request.headers.get("x-forwarded-for")
        if forwarded and trusted(peer, self.proxies):
            return forwarded.split(",")[0].strip()
        return peer

    def caller(self, request: Request) -> Caller | None:
        """The authenticated caller, or None."""
        peer = request.client.host if request.client else ""
        where = self.where(request)
        if self.header and trusted(peer, self.proxies):
            name = request.headers.get(self.header, "")
            if name:
                try:
                    check_principal_name(name)
                except ConfigError:
                    return None
                p = (
                    self.users.named(name, "header", where)
                    if self.users
                    else Principal(name, frozenset(), "header", where)
                )
                return Caller(p, self._sign("header:" + name))
        auth = request.headers.get("authorization", "")
        if auth[:7].lower() == "bearer ":
            known = self.users.by_token(auth[7:].strip(), "token", where) if self.users else None
            return None if known is None else Caller(known, None)
        sid = request.cookies.get(SESSION_COOKIE, "")
        session = self._sessions.get(sid)
        if session is None or session.expires < time.monotonic():
            self._sessions.pop(sid, None)
            return None
        return Caller(session.principal, self._sign("session:" + sid))

    def may_try(self, where: str) -> bool:
        """Whether this address may try to sign in now (at most LOGIN_TRIES a LOGIN_WINDOW)."""
        now = time.monotonic()
        tries = self._tries.setdefault(where, deque())
        while tries and tries[0] < now - LOGIN_WINDOW:
            tries.popleft()
        if len(tries) >= LOGIN_TRIES:
            return False
        tries.append(now)
        return True

    def sign_in(self, token: str, where: str) -> str | None:
        """A new session id for the user of ``token``, or None."""
        p = self.users.by_token(token, "session", where) if self.users else None
        if p is None:
            return None
        now = time.monotonic()
        self._sessions = {k: v for k, v in self._sessions.items() if v.expires > now}
        self._tries = {k: v for k, v in self._tries.items() if v and v[-1] > now - LOGIN_WINDOW}
        sid = secrets.token_urlsafe(32)
        self._sessions[sid] = Session(p, now + SESSION_SECONDS)
        return sid

    def sign_out(self, request: Request) -> None:
        self._sessions.pop(request.cookies.get(SESSION_COOKIE, ""), None)

    def login_csrf(self, nonce: str) -> str:
        """The sign-in form's CSRF token, bound to the nonce in its cookie."""
        return self._sign("login:" + nonce)

    def _sign(self, what: str) -> str:
        return hmac.new(self._key, what.encode(), hashlib.sha256).hexdigest()


def same(a: str | None, b: str | None) -> bool:
    """Two CSRF tokens compared in constant time; a missing one never matches."""
    return bool(a) and bool(b) and hmac.compare_digest(str(a), str(b))
