"""Redis Sentinel: the queue on whichever server the sentinels say is the primary now.

``redis+sentinel://[[USER]:PASSWORD@]HOST:PORT[,HOST:PORT...]/SERVICE[/DB][?OPTIONS]``: the
sentinels (port 26379 when left out) and the name they monitor the primary by (``sentinel
monitor SERVICE ...``). ``USER:PASSWORD@`` is what the primary asks for (``requirepass`` or an
ACL user), not the sentinels. Options: ``db`` (like ``/DB``), ``username`` and ``password`` (like
``USER:PASSWORD@``), ``sentinel_username`` and ``sentinel_password`` (the sentinels' own
``requirepass``); values percent-encoded. Each new connection asks the sentinels for the
primary's address, so a failover is followed once the old primary's connections fail.

A failover may lose the stream entries the replica had not received yet: Redis replicates
asynchronously. ``Publishing.lost_data`` notices the new primary (its replication id changed) and
the sweeper re-publishes what Postgres says is due.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import redis.asyncio as aioredis
from redis.asyncio.sentinel import Sentinel

SCHEME = "redis+sentinel"
PORT = 26379
OPTIONS = ("db", "username", "password", "sentinel_username", "sentinel_password")


def is_sentinel_url(url: str) -> bool:
    """True for a ``redis+sentinel://`` URL."""
    return url.split("://", 1)[0] == SCHEME


@dataclass(frozen=True)
class SentinelURL:
    """A ``redis+sentinel://`` URL taken apart."""

    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int = 0
    username: str | None = None
    password: str | None = None
    sentinel_username: str | None = None
    sentinel_password: str | None = None


def _address(text: str) -> tuple[str, int]:
    host, port = text, str(PORT)
    if text.startswith("["):  # [IPv6]:port
        host, _, rest = text[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else port
    elif ":" in text:
        host, port = text.rsplit(":", 1)
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"sentinel address {text[:60]!r} is not HOST:PORT (port 1 to 65535)")
    return host, int(port)


def parse_sentinel_url(url: str) -> SentinelURL:
    """Take a ``redis+sentinel://`` URL apart; ``ValueError`` names what is wrong without echoing
    a password."""
    if not is_sentinel_url(url):
        raise ValueError(f"a Sentinel URL starts with {SCHEME}://")
    parts = urlsplit(url)
    userinfo, _, hosts = parts.netloc.rpartition("@")
    user, _, secret = userinfo.partition(":")
    sentinels = tuple(_address(h) for h in hosts.split(",") if h)
    if not sentinels:
        raise ValueError(
            "a Sentinel URL needs at least one sentinel, e.g. redis+sentinel://h1:26379,h2:26379/mymaster"
        )
    path = [unquote(p) for p in parts.path.split("/") if p]
    if not path or len(path) > 2:
        raise ValueError("a Sentinel URL's path is /SERVICE or /SERVICE/DB, e.g. /mymaster/0")
    try:
        query = parse_qs(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError:
        raise ValueError("a Sentinel URL's query is not NAME=VALUE&...") from None
    unknown = sorted(set(query) - set(OPTIONS))
    if unknown:
        raise ValueError(f"unknown Sentinel URL option {unknown[0][:40]!r}; known: {', '.join(OPTIONS)}")
    opt = {k: v[-1] for k, v in query.items()}
    db = opt.get("db", path[1] if len(path) > 1 else "0")
    if not db.isdigit():
        raise ValueError("a Sentinel URL's database is a number (/SERVICE/DB or ?db=DB)")
    return SentinelURL(
        sentinels,
        path[0],
        int(db),
        opt.get("username") or unquote(user) or None,
        opt.get("password") or unquote(secret) or None,
        opt.get("sentinel_username") or None,
        opt.get("sentinel_password") or None,
    )


def sentinel_client(url: str, max_connections: int) -> tuple[aioredis.Redis, Sentinel]:
    """A client of the service's primary (found through the sentinels at each new connection),
    and the sentinels' own clients (closed apart: the primary's client does not own them)."""
    u = parse_sentinel_url(url)
    asked: dict[str, Any] = {"socket_timeout": 5.0, "socket_connect_timeout": 5.0}
    asked.update(username=u.sentinel_username, password=u.sentinel_password)
    sentinel = Sentinel(list(u.sentinels), sentinel_kwargs=asked)  # type: ignore[no-untyped-call, unused-ignore]
    primary = sentinel.master_for(
        u.service,
        db=u.db,
        username=u.username,
        password=u.password,
        socket_connect_timeout=5.0,
        max_connections=max_connections,
    )
    return primary, sentinel
