"""This module holds URLs as outlast reads and shows them, below the store and the queue that both use them.
It gives a database or Redis URL with its password hidden (``redact``), and a ``redis+sentinel://``
URL taken apart (``parse_sentinel_url``; the queue connects with it, the settings check it at
start)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qs, unquote, urlsplit, urlunsplit


def redact(url: str) -> str:
    """The URL without its password (after the user, or a ``password=`` parameter), for messages;
    never raises, even on a malformed URL."""
    url = re.sub(r"(?i)\b((?:sentinel_)?password=)[^&\s]*", r"\1***", url)
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:  # e.g. an unclosed IPv6 bracket: hide whatever sits between user and host
        return re.sub(r"(//[^/@:]*:)[^/]*@", r"\1***@", url)
    if password is None:
        return url
    netloc = parts.netloc.replace(f":{password}@", ":***@")
    return urlunsplit(parts._replace(netloc=netloc))


SCHEME = "redis+sentinel"
PORT = 26379
OPTIONS = ("db", "username", "password", "sentinel_username", "sentinel_password")


def is_sentinel_url(url: str) -> bool:
    """True for a ``redis+sentinel://`` URL."""
    return url.split("://", 1)[0] == SCHEME


@dataclass(frozen=True)
class SentinelURL:
    """A ``SentinelURL`` is a ``redis+sentinel://`` URL taken apart."""

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
    # Split by hand: Python 3.14's urlsplit refuses a netloc of several hosts with an IPv6 one.
    rest = url.split("://", 1)[1].partition("#")[0]
    rest, _, query_text = rest.partition("?")
    netloc, _, path_text = rest.partition("/")
    userinfo, _, hosts = netloc.rpartition("@")
    user, _, secret = userinfo.partition(":")
    sentinels = tuple(_address(h) for h in hosts.split(",") if h)
    if not sentinels:
        raise ValueError(
            "a Sentinel URL needs at least one sentinel, e.g. redis+sentinel://h1:26379,h2:26379/mymaster"
        )
    path = [unquote(p) for p in path_text.split("/") if p]
    if not path or len(path) > 2:
        raise ValueError("a Sentinel URL's path is /SERVICE or /SERVICE/DB, e.g. /mymaster/0")
    try:
        query = parse_qs(query_text, keep_blank_values=True, strict_parsing=bool(query_text))
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
