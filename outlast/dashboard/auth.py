"""Every request to the dashboard and its API is authenticated: this module says who is asking.

Three ways in, checked in this order: the trusted header (``OUTLAST_AUTH_HEADER``, believed only
from ``OUTLAST_TRUSTED_PROXIES``), a bearer token listed in the users file, or a session made by
signing in with such a token (an HttpOnly, SameSite=Strict cookie naming a session kept in
Postgres: every dashboard process on the database knows it, and a restart signs nobody out; the
cookie carries the seal of its row, so a row the dashboard did not make is refused, and no session
outlives SESSION_SECONDS from its making). The users file is read again whenever it changes: a user
removed, or given a new token, is refused at the next request, sessions included; a file deleted
lists nobody. A form carries a CSRF token bound to its session (or to the proxy's user and the
time), signed with a key kept in Postgres; a bearer token needs none, a browser never sends it by
itself. Sign-ins are limited per client address and per proxy.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
import secrets
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypeAlias

import structlog
from starlette.requests import Request

from outlast.errors import ConfigError
from outlast.identity import Principal, Users, check_principal_name, hash_token, trusted
from outlast.producer import AsyncClient
from outlast.settings import Settings

log = structlog.get_logger("outlast.dashboard")

SESSION_COOKIE = "outlast_session"
LOGIN_COOKIE = "outlast_login"
SESSION_SECONDS = 8 * 3600  # a session's lifetime from its making, whatever its row says
CSRF_SECONDS = 8 * 3600  # a proxy's user's CSRF token changes this often
LOGIN_TRIES = 5  # per client address ...
PROXY_TRIES = 60  # ... and per trusted proxy (all the clients behind it) ...
LOGIN_WINDOW = 60.0  # ... per this many seconds
LOGIN_BODY = 8192  # bytes: a sign-in form is a token and a CSRF token
LOGIN_FIELDS = 8  # fields of it at most (a browser may add a few of its own)
LOOPBACK = ("127.0.0.1", "::1", "localhost")
IPAddress: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
NUL = "a NUL byte is not allowed in a URL, a field or a comment: remove it"


@dataclass(frozen=True)
class Caller:
    """A ``Caller`` is an authenticated request: who, and the CSRF token its forms must carry (None:
    a bearer token, which needs none); ``earlier``, a token still taken (a proxy's user's, of the
    window before)."""

    principal: Principal
    csrf: str | None
    earlier: str | None = None

    def accepts(self, token: str | None) -> bool:
        """Whether a form or a request may carry ``token`` as its CSRF token."""
        return same(token, self.csrf) or same(token, self.earlier)


def check_bind(host: str, settings: Settings) -> None:
    """Refuse to serve beyond this machine when nobody could be authenticated."""
    if host not in LOOPBACK and not settings.users and not settings.auth_header:
        raise ConfigError(
            f"the dashboard will not listen on {host} without users: set OUTLAST_USERS (make one "
            "with outlast users add NAME --group ops) or OUTLAST_AUTH_HEADER behind a proxy, "
            "or use --host 127.0.0.1"
        )


def _address(text: str) -> IPAddress | None:
    """``text`` as an IP address (an IPv4 one mapped into IPv6 as itself), or None."""
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
    return mapped or address


def limit_key(where: str) -> str:
    """What the sign-in limit counts a client's attempts under: its IPv4 address, or the /64 of
    its IPv6 one (a single host is commonly given a whole /64: per address, it would have
    2**64 times the tries). Only a parsed address makes a key; anything else is one key, "-"."""
    address = _address(where)
    if address is None:
        return "-"
    if address.version == 6:
        return str(ipaddress.ip_network((address, 64), strict=False))
    return str(address)


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def _id_hash(sid: str) -> str:
    return hashlib.sha256(sid.encode()).hexdigest()


class Gate:
    """The ``Gate`` holds the users file (read again when it changes), and the sessions, sign-in
    limit and signing keys kept in Postgres for every dashboard process."""

    def __init__(self, settings: Settings, client: AsyncClient) -> None:
        self.path = Path(settings.users) if settings.users else None
        self.users = Users.load(self.path) if self.path else None
        self._seen = _stamp(self.path) if self.path else None
        self.header = settings.auth_header
        self.always_secure = settings.dashboard_secure_cookies == "on"
        self.proxies = [p.strip() for p in settings.trusted_proxies.split(",") if p.strip()]
        self.client = client
        self.window = LOGIN_WINDOW
        self.lifetime = SESSION_SECONDS
        self.csrf_seconds = CSRF_SECONDS
        self._keys: dict[str, bytes] = {}

    async def current(self) -> Users | None:
        """The users file, read again if it changed since; a removed user's sessions, and those
        made with a replaced token, end. A file that is gone lists nobody (every session ends); one
        that cannot be parsed (half-written) keeps the last good one (both logged)."""
        if self.path is None:
            return None
        now = _stamp(self.path)
        if now != self._seen:
            self._seen = now
            try:
                self.users = Users({}, self.path) if now is None else Users.load(self.path)
            except ConfigError as exc:
                log.error("users.unreadable", error=str(exc))  # the last good one stays
                return self.users
            if now is None:
                log.error("users.gone", path=str(self.path))
            await self.client.open()
            ended = await self.client.sessions.keep_only(self.users.tokens())
            if ended:
                log.info("sessions.ended", users=ended)
        return self.users

    def where(self, request: Request) -> str:
        """The client's address: the TCP peer, or behind trusted proxies the right-most hop of
        X-Forwarded-For that is not one of them (those to its left are the client's to write). A
        hop that is not an IP address ends the walk at the last proxy that could be believed."""
        peer = request.client.host if request.client else ""
        if not trusted(peer, self.proxies):
            return peer
        hops = [h.strip() for v in request.headers.getlist("x-forwarded-for") for h in v.split(",")]
        where = peer
        for hop in reversed([h for h in hops if h]):
            address = _address(hop)
            if address is None:
                return where
            where = str(address)
            if not trusted(where, self.proxies):
                return where
        return where

    def https(self, request: Request) -> bool:
        """Whether the client reached the dashboard over HTTPS: its own connection, or the
        X-Forwarded-Proto of a trusted proxy."""
        peer = request.client.host if request.client else ""
        said = request.headers.get("x-forwarded-proto", "").strip().lower()
        return request.url.scheme == "https" or (said == "https" and trusted(peer, self.proxies))

    def secure_cookies(self, request: Request) -> bool:
        """Whether the cookies of this answer are marked Secure: always with
        OUTLAST_DASHBOARD_SECURE_COOKIES=on, else when the client came over HTTPS."""
        return self.always_secure or self.https(request)

    async def caller(self, request: Request) -> Caller | None:
        """The authenticated caller, or None."""
        peer = request.client.host if request.client else ""
        where = self.where(request)
        users = await self.current()
        if self.header and trusted(peer, self.proxies):
            name = request.headers.get(self.header, "")
            if name:
                return await self._header_caller(users, name, where)
        auth = request.headers.get("authorization", "")
        if auth[:7].lower() == "bearer ":
            known = users.by_token(auth[7:].strip(), "token", where) if users else None
            return None if known is None else Caller(known, None)
        cookie = request.cookies.get(SESSION_COOKIE, "")
        if not cookie or users is None:
            return None
        return await self._session_caller(users, cookie, where)

    async def _header_caller(self, users: Users | None, name: str, where: str) -> Caller | None:
        """The proxy's user; their CSRF token is of the current window of CSRF_SECONDS (the
        one before is still taken: a form rendered just before the window turned)."""
        try:
            check_principal_name(name)
        except ConfigError:
            return None
        anyone = Principal(name, how="header", where=where)
        p = users.named(name, "header", where) if users else anyone
        if p is None:
            return None
        window = int(time.time() // self.csrf_seconds)
        now, before = (
            await self.sign(f"header:{name}:{window}"),
            await self.sign(f"header:{name}:{window - 1}"),
        )
        return Caller(p, now, before)

    async def _session_caller(self, users: Users, cookie: str, where: str) -> Caller | None:
        """The user of the session the cookie names, if its row is one this dashboard made (the
        cookie carries the row's seal), is younger than the session lifetime, and its user still
        has the token it was made with."""
        sid, _, seal = cookie.partition(".")
        await self.client.open()
        found = await self.client.sessions.get(_id_hash(sid), self.lifetime)
        if found is None:
            return None
        name, token_hash, made = found
        user = users.users.get(name)
        if not same(seal, await self._seal(sid, name, token_hash, made)):
            if seal:  # a row this dashboard never sealed, or one altered since
                log.error("session.forged", principal=name)
            else:  # a cookie of a dashboard from before sessions were sealed: sign in again
                log.info("session.unsealed", principal=name)
            await self.client.sessions.end(_id_hash(sid))
            return None
        if user is None or user.token_hash != token_hash:
            await self.client.sessions.end(_id_hash(sid))  # removed, or a new token since
            return None
        return Caller(users.principal(user, "session", where), await self.sign("session:" + sid))

    async def _seal(self, sid: str, name: str, token_hash: str, made: datetime) -> str:
        """What binds a session's row to its cookie: the row's id, user, token hash and time of
        making, signed with the dashboard's session key (in ``dashboard_keys``). Whoever can
        write the sessions table and read the users file, but not that key, cannot make a row a
        cookie would be taken with, nor move a row to another user or to a later start."""
        micros = (made - EPOCH) // timedelta(microseconds=1)  # the same whatever the time zone
        return await self.sign(f"{_id_hash(sid)}\n{name}\n{token_hash}\n{micros}", key="session")

    async def may_try(self, request: Request) -> bool:
        """Whether this client may try to sign in now: at most LOGIN_TRIES a window from its
        address, and PROXY_TRIES from all those behind one trusted proxy (a client next to the
        dashboard can write any X-Forwarded-For, never its own TCP address)."""
        peer = request.client.host if request.client else ""
        where = self.where(request)
        await self.client.open()
        if await self.client.sessions.attempt("client:" + limit_key(where), self.window) > LOGIN_TRIES:
            return False
        if where == peer:
            return True
        return await self.client.sessions.attempt("proxy:" + peer, self.window) <= PROXY_TRIES

    def refusal(self, caller: Caller, role: str, what: str) -> str | None:
        """Why ``caller`` may not do ``what`` (which takes ``role``), or None when they may."""
        p = caller.principal
        if role in p.roles:
            return None
        groups = sorted(self.users.roles.get(role, ())) if self.users else []
        return (
            f"{p.name} may not {what}: that takes the {role} role, which the users file gives to "
            f"the groups {', '.join(groups) or '(none)'} (its [roles] table; {p.name} has "
            f"{', '.join(sorted(p.roles))})"
        )

    async def sign_in(self, token: str) -> str | None:
        """A new session's cookie (its id and its seal) for the user of ``token``, or None."""
        users = await self.current()
        p = users.by_token(token, "session") if users else None
        if p is None:
            return None
        sid, token_hash = secrets.token_urlsafe(32), hash_token(token)
        made = await self.client.sessions.create(_id_hash(sid), p.name, token_hash, self.lifetime)
        return sid + "." + await self._seal(sid, p.name, token_hash, made)

    async def sign_out(self, request: Request) -> None:
        sid = request.cookies.get(SESSION_COOKIE, "").partition(".")[0]
        if sid:
            await self.client.open()
            await self.client.sessions.end(_id_hash(sid))

    async def login_csrf(self, nonce: str) -> str:
        """The sign-in form's CSRF token, bound to the nonce in its cookie."""
        return await self.sign("login:" + nonce)

    async def sign(self, what: str, key: str = "csrf") -> str:
        """``what`` signed (HMAC-SHA256, hex) with the dashboard's key of that name, made once
        and kept in Postgres for every dashboard process: "csrf" for the forms' tokens, "cursor"
        for the lists' cursors."""
        if key not in self._keys:
            await self.client.open()
            self._keys[key] = await self.client.sessions.key(key, secrets.token_bytes(32))
        return hmac.new(self._keys[key], what.encode(), hashlib.sha256).hexdigest()


def same(a: str | None, b: str | None) -> bool:
    """Two CSRF tokens (or signatures) compared in constant time; a missing one never matches.
    Compared as bytes: a text with a character beyond ASCII is refused by ``compare_digest``."""
    return bool(a) and bool(b) and hmac.compare_digest(_bytes(a), _bytes(b))


def _bytes(text: str | None) -> bytes:
    return str(text).encode("utf-8", "surrogatepass")
