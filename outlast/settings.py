"""One settings object, read once at start from ``OUTLAST_*`` variables (or given directly).

Every value is checked when a ``Settings`` is made (``from_env``, ``with_`` or directly): a bad one
raises ``ConfigError`` with one line naming the variable and what it accepts.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from outlast.errors import ConfigError

# name: (lowest, highest, unit); sweep_interval's lowest is excluded, every other bound included.
LIMITS: dict[str, tuple[float, float, str]] = {
    "lease_ttl": (0.5, 3600, "seconds"),
    "sweep_interval": (0, 60, "seconds"),
    "republish_after": (0.1, 86400, "seconds"),
    "grace": (0, 3600, "seconds"),
    "store_retry": (0, 3600, "seconds"),
    "concurrency": (1, 4096, "runs"),
    "max_attempts": (1, 1000, "attempts"),
    "max_payload": (1024, 256 * 1024 * 1024, "bytes"),
}
_WHOLE = {"concurrency", "max_attempts", "max_payload"}
_OPEN_LOW = {"sweep_interval"}
_SCHEMA = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_LOG_FORMATS = ("auto", "json", "console")


def env_var(name: str) -> str:
    """The environment variable of the setting ``name``."""
    return f"OUTLAST_{name.upper()}"


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def bounded(name: str, value: object) -> float:
    """``value`` (a number, or text as read from the environment) checked against the bounds of
    the setting ``name``; ``ValueError`` says what is accepted."""
    lo, hi, unit = LIMITS[name]
    whole = name in _WHOLE
    span = f"{'(' if name in _OPEN_LOW else '['}{_num(lo)}, {_num(hi)}]"
    want = f"must be a {'whole number' if whole else 'finite number'} of {unit} in {span}, got {_show(value)}"
    number: float
    try:
        if isinstance(value, str):
            number = int(value.strip()) if whole else float(value.strip())
        elif (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or (whole and isinstance(value, float))
        ):
            raise ValueError
        else:
            number = value
    except ValueError:
        raise ValueError(want) from None
    low_ok = number > lo if name in _OPEN_LOW else number >= lo
    if not (low_ok and number <= hi):  # NaN fails both comparisons, infinity the second
        raise ValueError(want)
    return number


def check_name(value: object, limit: int = 100) -> str:
    """A queue name or key prefix: 1 to ``limit`` printable characters, no whitespace or braces
    (braces would make a Redis Cluster hash tag); ``ValueError`` says so."""
    if (
        isinstance(value, str)
        and 0 < len(value) <= limit
        and not any(c.isspace() or c in "{}" or not c.isprintable() for c in value)
    ):
        return value
    raise ValueError(
        f"must be 1 to {limit} printable characters without whitespace or braces, got {_show(value)}"
    )


def check_schema(value: object) -> str:
    """A Postgres schema name that needs no quoting (it goes into connection options)."""
    if not (isinstance(value, str) and _SCHEMA.fullmatch(value)):
        raise ValueError(
            "must be a plain lowercase SQL identifier ([a-z_][a-z0-9_]*, at most 63 characters), "
            f"got {_show(value)}"
        )
    return value


def _check_failpoints(value: object) -> None:
    from outlast.failpoints import POINTS

    names = [item.partition(":")[0] for item in str(value).split(",") if item.strip()]
    unknown = [n.strip() for n in names if n.strip() not in POINTS]
    if not isinstance(value, str) or unknown:
        raise ValueError(f"names unknown failpoints {_show(unknown)}; known: {', '.join(sorted(POINTS))}")


def _check_log_format(value: object) -> None:
    if value not in _LOG_FORMATS:
        raise ValueError(f"must be one of {', '.join(_LOG_FORMATS)}, got {_show(value)}")


def check_url(value: object, schemes: tuple[str, ...]) -> str:
    """A URL with one of ``schemes`` that parses; ``ValueError`` names what is wrong without
    echoing the URL (it may hold a password)."""
    wanted = " or ".join(f"{s}://" for s in schemes)
    if not isinstance(value, str) or any(c.isspace() or not c.isprintable() for c in value):
        raise ValueError(f"must be a {wanted} URL without whitespace or control characters")
    scheme = value.split("://", 1)[0] if "://" in value else ""
    if scheme not in schemes:
        plain = re.fullmatch(r"[a-zA-Z][a-zA-Z0-9+.-]{0,19}", scheme)  # else it may hold a password
        got = f"scheme '{scheme}'" if plain else "no scheme"
        raise ValueError(f"must be a {wanted} URL, got {got}")
    try:
        if scheme.startswith("postgres"):
            _check_postgres(value)
        elif scheme == "unix" and not urlsplit(value).path:
            raise ValueError("a unix:// URL needs the socket's path, e.g. unix:///run/redis.sock")
        else:
            urlsplit(value).port  # noqa: B018 - raises ValueError on a malformed host or port
    except ValueError as exc:
        first = (str(exc).strip() or "malformed").splitlines()[0]
        raise ValueError(f"is not a valid URL: {first}") from None
    return value


def _check_postgres(url: str) -> None:
    from psycopg import ProgrammingError
    from psycopg.conninfo import conninfo_to_dict

    try:
        params = conninfo_to_dict(url)
    except ProgrammingError as exc:  # libpq's message may quote the URL, password and all
        raise ValueError(str(exc).replace(url, "the URL")) from None
    for port in str(params.get("port", "")).split(","):
        if port and not (port.isdigit() and 0 < int(port) < 65536):
            raise ValueError(f"port {port[:10]!r} is not a number from 1 to 65535")


_CHECKS: dict[str, Callable[[Any], object]] = {
    **{name: partial(bounded, name) for name in LIMITS},
    "schema": check_schema,
    "prefix": check_name,
    "queue": check_name,
    "log_format": _check_log_format,
    "failpoints": _check_failpoints,
    "worker_name": partial(check_name, limit=200),
    "database_url": partial(check_url, schemes=("postgresql", "postgres")),
    "redis_url": partial(check_url, schemes=("redis", "rediss", "unix")),
}
_OPTIONAL = {"worker_name", "database_url", "redis_url"}


def _from_text(name: str, raw: str) -> Any:
    """An environment variable's text, typed for the setting ``name``."""
    if name == "home":
        return Path(raw)
    if name in LIMITS:
        try:
            return bounded(name, raw)
        except ValueError as exc:
            raise ConfigError(f"{env_var(name)} {exc}") from None
    return raw


@dataclass(frozen=True)
class Settings:
    """Everything outlast can be told. Nothing deeper reads the environment."""

    database_url: str | None = None
    redis_url: str | None = None
    schema: str = "outlast"
    prefix: str = "outlast"
    home: Path = field(default_factory=lambda: Path(".outlast"))
    queue: str = "default"
    lease_ttl: float = 30.0
    max_attempts: int = 5
    sweep_interval: float = 1.0
    republish_after: float = 30.0
    grace: float = 10.0
    concurrency: int = 16
    worker_name: str | None = None
    failpoints: str = ""
    log_format: str = "auto"
    # How long a storage write is retried before the run is left to be taken up again.
    store_retry: float = 60.0
    # The largest input, result or approval arguments accepted, in bytes of canonical JSON.
    max_payload: int = 1048576

    def __post_init__(self) -> None:
        for name, check in _CHECKS.items():
            value = getattr(self, name)
            if value is None and name in _OPTIONAL:
                continue
            try:
                check(value)
            except ValueError as exc:
                raise ConfigError(f"{env_var(name)} {exc}") from None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Read ``OUTLAST_*`` variables (an empty one counts as unset); explicit overrides (not
        None) win, and a variable they replace is not read."""
        e = os.environ if env is None else env
        given = {k: v for k, v in overrides.items() if v is not None}
        read = {
            f.name: _from_text(f.name, e[env_var(f.name)])
            for f in fields(cls)
            if f.name not in given and e.get(env_var(f.name))
        }
        return cls(**read, **given)

    def with_(self, **overrides: Any) -> Settings:
        """A copy with the given fields replaced (None means: keep), checked again."""
        return replace(self, **{k: v for k, v in overrides.items() if v is not None})
