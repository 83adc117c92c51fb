"""outlast has one settings object, read once at start from ``OUTLAST_*`` variables (or given directly).

Every value is checked when a ``Settings`` is made (``from_env``, ``with_`` or directly): a bad one
raises ``ConfigError`` with one line naming the variable and what it accepts.
"""

from __future__ import annotations

import math
import os
import re
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from outlast._urls import parse_sentinel_url
from outlast.errors import ConfigError

_SCHEMA = re.compile(r"[a-z_][a-z0-9_]{0,62}")


def env_var(name: str) -> str:
    """The environment variable of the setting ``name``."""
    return f"OUTLAST_{name.upper()}"


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


@dataclass(frozen=True)
class Spec:
    """A ``Spec`` says how one setting is explained and checked; ``Settings`` and the CLI both read it."""

    help: str
    unit: str = ""  # set for a number, which must lie within [low, high] ((low, high] if open_low)
    low: float = 0
    high: float = 0
    open_low: bool = False
    whole: bool = False
    check: Callable[[Any], object] | None = None
    choices: tuple[str, ...] = ()

    def validate(self, value: object) -> Any:
        """``value`` (text as read from the environment is parsed) if accepted, else
        ``ValueError`` saying what is."""
        if self.unit:
            return self._bounded(value)
        if self.choices and value not in self.choices:
            raise ValueError(f"must be one of {', '.join(self.choices)}, got {_show(value)}")
        return value if self.check is None else self.check(value)

    def _bounded(self, value: object) -> float:
        span = f"{'(' if self.open_low else '['}{_num(self.low)}, {_num(self.high)}]"
        kind = "whole number" if self.whole else "finite number"
        want = f"must be a {kind} of {self.unit} in {span}, got {_show(value)}"
        number: float
        try:
            if isinstance(value, str):
                number = int(value.strip()) if self.whole else float(value.strip())
            elif (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or (self.whole and isinstance(value, float))
            ):
                raise ValueError
            else:
                number = value
        except ValueError:
            raise ValueError(want) from None
        low_ok = number > self.low if self.open_low else number >= self.low
        if not (low_ok and number <= self.high):  # NaN fails both comparisons, infinity the second
            raise ValueError(want)
        return number


def setting(
    default: Any,
    help: str,
    unit: str = "",
    *,
    ge: float = 0,
    gt: float | None = None,
    le: float = math.inf,
    check: Callable[[Any], object] | None = None,
    choices: tuple[str, ...] = (),
    secret: bool = False,
) -> Any:
    """One setting, declared once: its default, its help (the CLI's too), and what it accepts —
    a number of ``unit`` with its bounds (``ge`` or ``gt``, and ``le``), ``choices`` or a
    ``check``. Its variable is ``OUTLAST_<NAME>``. A ``secret`` one is left out of the settings'
    ``repr`` (and so of any display or log of them)."""
    low, open_low = (ge, False) if gt is None else (gt, True)
    whole = isinstance(default, int)
    spec = Spec(help, unit, low, le, open_low, whole, check, choices)
    # A dataclasses.field(); typed Any so that a type checker takes it as the field's default.
    return field(default=default, repr=not secret, metadata={"spec": spec})


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


def _check_networks(value: object) -> str:
    """Comma-separated IP addresses or networks."""
    import ipaddress

    try:
        for part in str(value).split(","):
            ipaddress.ip_network(part.strip(), strict=False)
    except ValueError:
        raise ValueError(f"must be IP addresses or networks, comma-separated, got {_show(value)}") from None
    return str(value)


def check_schema(value: object) -> str:
    """A Postgres schema name that needs no quoting (it goes into connection options)."""
    if not (isinstance(value, str) and _SCHEMA.fullmatch(value)):
        raise ValueError(
            "must be a plain lowercase SQL identifier ([a-z_][a-z0-9_]*, at most 63 characters), "
            f"got {_show(value)}"
        )
    return value


MAKE_KEY = 'python -c "import secrets; print(secrets.token_urlsafe(32))"'
KEY_BITS = 64  # the least a key's estimated entropy may be (``key_bits``)


def key_bits(key: str) -> float:
    """An estimate of the bits of chance in ``key``, low for a predictable one: the entropy of its
    characters' frequencies (0 for one character repeated) times its length, where a run of three
    characters seen before counts for nothing (``"password" * 4`` is no longer than ``"password"``).
    A random key of 32 characters or more, even of digits only, is far above ``KEY_BITS``."""
    counts = Counter(key)
    per_char = -sum(n / len(key) * math.log2(n / len(key)) for n in counts.values())
    return per_char * (len({key[i : i + 3] for i in range(len(key) - 2)}) + 2)


def _check_secret_key(value: object) -> str:
    """A random key of 32 or more characters; the message never shows the value."""
    if not (isinstance(value, str) and len(value) >= 32 and value.isprintable()):
        raise ValueError(f"must be 32 or more printable characters; make one with: {MAKE_KEY}")
    if key_bits(value) < KEY_BITS:
        raise ValueError(
            f"is too predictable (repeated or few characters): make a random one with: {MAKE_KEY}"
        )
    return value


_DURATION = re.compile(r"(\d{1,9}(?:\.\d{1,6})?)([smhdw])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
MAX_AGE = 36500 * 86400.0  # a hundred years, in seconds


def duration(value: object) -> float:
    """The seconds of a duration written as a number and a unit (45s, 90m, 12h, 30d, 2w), up to
    36500d; ``ValueError`` says what is accepted."""
    m = _DURATION.fullmatch(value.strip()) if isinstance(value, str) else None
    seconds = float(m[1]) * _UNITS[m[2]] if m else 0.0
    if not 0 < seconds <= MAX_AGE:
        raise ValueError(
            f"must be a duration such as 30d, 12h, 90m or 45s (at most 36500d), got {_show(value)}"
        )
    return seconds


def _check_retention(value: object) -> object:
    if value != "" and duration(value) < 60:
        raise ValueError(f"must be at least 1m (or unset: keep finished runs), got {_show(value)}")
    return value


def _check_failpoints(value: object) -> str:
    from outlast._failpoints import POINTS

    names = [item.partition(":")[0] for item in str(value).split(",") if item.strip()]
    unknown = [n.strip() for n in names if n.strip() not in POINTS]
    if not isinstance(value, str) or unknown:
        raise ValueError(f"names unknown failpoints {_show(unknown)}; known: {', '.join(sorted(POINTS))}")
    return value


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
        elif scheme == "redis+sentinel":
            parse_sentinel_url(value)
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


_POSTGRES = partial(check_url, schemes=("postgresql", "postgres"))
_REDIS = partial(
    check_url, schemes=("redis", "rediss", "unix", "redis+cluster", "rediss+cluster", "redis+sentinel")
)
_S3 = partial(check_url, schemes=("s3",))


@dataclass(frozen=True)
class Settings:
    """Everything outlast can be told, each setting declared once. Nothing deeper reads the
    environment. A setting whose default is None may stay unset."""

    database_url: str | None = setting(None, "Postgres URL (unset: embedded default).", check=_POSTGRES)
    redis_url: str | None = setting(None, "Redis URL (unset: embedded default).", check=_REDIS)
    schema: str = setting("outlast", "Postgres schema.", check=check_schema)
    prefix: str = setting("outlast", "Redis key prefix.", check=check_name)
    home: Path | None = setting(  # noqa: RUF009 - a field()
        None,
        "Where the embedded servers live (unset: .outlast in the project, the nearest folder up from "
        "the working directory holding .outlast, pyproject.toml or .git).",
    )
    queue: str = setting("default", "Queue name.", check=check_name)
    lease_ttl: float = setting(
        30.0, "Seconds a run's lease lasts; renewed every third of it.", "seconds", ge=0.5, le=3600
    )
    max_attempts: int = setting(5, "Claims without progress before a run fails.", "attempts", ge=1, le=1000)
    sweep_interval: float = setting(1.0, "Seconds between a worker's sweeps.", "seconds", gt=0, le=60)
    republish_after: float = setting(
        30.0,
        "Seconds a queued run may go unseen before it is re-published (not while its entry waits in "
        "its stream).",
        "seconds",
        ge=0.1,
        le=86400,
    )
    grace: float = setting(10.0, "Seconds to finish on SIGTERM.", "seconds", ge=0, le=3600)
    concurrency: int = setting(16, "Runs at once.", "runs", ge=1, le=4096)
    event_loop: str = setting(
        "auto",
        "The worker's event loop: uvloop, asyncio, or auto (uvloop where it is installed).",
        choices=("auto", "uvloop", "asyncio"),
    )
    worker_name: str | None = setting(
        None,
        "Consumer name (default: HOST-PID-XXXX, new at each start).",
        check=partial(check_name, limit=200),
    )
    failpoints: str = setting(
        "", "Crash tests only: name[:tool],... kills the worker there.", check=_check_failpoints
    )
    log_format: str = setting(
        "auto", "Log lines as json, console, or auto.", choices=("auto", "json", "console")
    )
    store_retry: float = setting(
        60.0,
        "Seconds a storage write is retried before the run is left to be taken up again.",
        "seconds",
        ge=0,
        le=3600,
    )
    slow_round_trip: float = setting(
        0.1,
        "Seconds a Postgres round trip may take before a worker logs store.slow and outlast health "
        "fails (or a tenth of the lease TTL, if less).",
        "seconds",
        gt=0,
        le=60,
    )
    writer_in_flight: int = setting(
        1,
        "Transactions the shared-commit writer keeps in flight at once, each on a connection of its own.",
        "transactions",
        ge=1,
        le=8,
    )
    max_payload: int = setting(
        1048576,
        "The largest journal entry kept inline, in bytes of canonical JSON; an entry larger holds its "
        "largest values by reference, in the payload store. Also the largest message, run input or "
        "run result kept in its row (a larger one is held by reference too), and the largest state "
        "value accepted.",
        "bytes",
        ge=1024,
        le=256 * 1024 * 1024,
    )
    run_size_warn: int = setting(
        64 * 1024 * 1024,
        "Bytes a run may journal (every generation) before it emits its one size_warning event and "
        "its worker logs run.size_warning (0: never).",
        "bytes",
        ge=0,
    )
    max_referenced: int = setting(
        256 * 1024 * 1024,
        "The largest value held by reference (a tool's result or arguments, a workflow's result, a "
        "capture, a message, a run's input), in bytes of canonical JSON.",
        "bytes",
        ge=1024,
        le=4 * 1024 * 1024 * 1024,
    )
    payload_store: str | None = setting(
        None,
        "An S3-compatible object store for the payload store's bytes: s3://BUCKET/PREFIX, with "
        "endpoint=URL and region=NAME in its query where needed; credentials from AWS_ACCESS_KEY_ID "
        "and AWS_SECRET_ACCESS_KEY. Unset: in Postgres.",
        check=_S3,
    )
    payload_grace: float = setting(
        3600.0,
        "Seconds a stored payload that no journal entry refers to is kept before the sweeper "
        "deletes it (its worker died between storing it and journaling the reference).",
        "seconds",
        gt=0,
    )
    max_inbox: int = setting(
        1000,
        "Messages a run may hold untaken on one channel; a send past it is refused (the run's other "
        "channels still take theirs).",
        "messages",
        ge=1,
        le=1000000,
    )
    max_inbox_run: int = setting(
        4000,
        "Messages a run may hold untaken on all its channels together; a send past it is refused.",
        "messages",
        ge=1,
        le=10000000,
    )
    receive_linger: float = setting(
        0.5,
        "Seconds a run whose receive finds no message stays held in its worker's memory, woken by a "
        "send, before it waits with no worker held (0: it waits at once).",
        "s",
        ge=0,
        le=60,
    )
    callback_url: str | None = setting(
        None,
        "Public base URL of the callbacks endpoint (where outlast.web.callbacks is mounted, e.g. "
        "https://example.com/callbacks); unset: /callbacks, the dashboard's path.",
    )
    hold_ms: float = setting(
        5.0,
        "Milliseconds a read's or idempotent tool's result may be held, written with the run's next write.",
        "ms",
        ge=0,
        le=60000,
    )
    hold_max: int = setting(
        16, "Results a run holds at most before they are written (0: none held).", "entries", ge=0, le=1000
    )

    secret_key: str | None = setting(
        None,
        "Key of the keyed hash secret tool arguments are stored as (required if a tool declares any).",
        check=_check_secret_key,
        secret=True,
    )
    metrics_port: int = setting(0, "Serve Prometheus metrics on this port (0: none).", "port", ge=0, le=65535)
    metrics_host: str = setting(
        "127.0.0.1", "Address the metrics endpoint listens on (0.0.0.0 or :: for every interface)."
    )
    metrics_tenants: str = setting(
        "", "Tenants named in the metrics' tenant label, comma-separated (*: every one); others: other."
    )
    trace_payloads: str = setting(
        "off", "Put tool arguments and results in trace spans.", choices=("off", "on")
    )
    log_payloads: str = setting(
        "off", "Put tool arguments (sealed) and results in log lines.", choices=("off", "on")
    )
    users: str | None = setting(
        None, "The users file (TOML or YAML): who may sign in to the dashboard and API, and their groups."
    )
    auth_header: str | None = setting(
        None, "A header naming the user, set by a reverse proxy (honoured only from trusted proxies)."
    )
    trusted_proxies: str = setting(
        "127.0.0.1,::1",
        "Addresses or networks (comma-separated) whose auth header is believed.",
        check=_check_networks,
    )
    dashboard_secure_cookies: str = setting(
        "auto",
        "The dashboard's cookies marked Secure: auto (when the request came over HTTPS, by its own "
        "connection or a trusted proxy's X-Forwarded-Proto), or on (always, and "
        "Strict-Transport-Security sent: for TLS ended by a proxy whose word is not taken).",
        choices=("auto", "on"),
    )
    live_seconds: float = setting(
        300.0,
        "Seconds a dashboard page's live event stream lasts; the browser then opens a new one.",
        "seconds",
        ge=1,
        le=86400,
    )
    live_streams: int = setting(
        16,
        "Live event streams (one per open dashboard page) one person may hold open at once in a "
        "dashboard process; past it, a new one is refused (429).",
        "streams",
        ge=1,
        le=10000,
    )
    retention: str = setting(
        "",
        "Finished runs older than this (e.g. 30d) are deleted by the workers' sweeper, every "
        "minute; unset: kept.",
        check=_check_retention,
    )
    rollup_every: float = setting(
        60.0,
        "Seconds between a worker's steps of the dashboard charts' rollup (its latencies added; "
        "one worker a step counts the runs and samples the queues).",
        "seconds",
        ge=0.5,
        le=3600,
    )
    tenant_window: int = setting(
        32,
        "Runs of one tenant published and not yet started in a queue; its others wait in Postgres "
        "for their turn, so that one tenant's backlog does not delay another's (0: no limit).",
        "runs",
        ge=0,
        le=100000,
    )
    pg_pooler: str = setting(
        "none",
        "How Postgres is reached: none (directly), or through a pooler such as PgBouncer in "
        "transaction or session mode (the schema is then set in each transaction, not at connect).",
        choices=("none", "transaction", "session"),
    )
    pg_prepare: str = setting(
        "auto",
        "Server-side prepared statements: on, off, or auto (off with OUTLAST_PG_POOLER=transaction, "
        "which PgBouncer before 1.21 cannot keep them across).",
        choices=("auto", "on", "off"),
    )
    listen_url: str | None = setting(
        None,
        "A direct Postgres URL for LISTEN (a waiting client's wake-ups); unset: the database URL, "
        "unless that is a transaction pooler (clients then poll).",
        check=_POSTGRES,
    )
    program_grace: float = setting(
        0.0,
        "Seconds a run is still handed back to the queue for a worker that serves its program once "
        "no live worker serves it (then it waits, program_changed, until one does).",
        "seconds",
        ge=0,
        le=86400,
    )

    move_parked: str = setting(
        "on",
        "Whether a worker takes forward, by itself, the parked runs (program_changed, "
        "workflow_error) of the workflows it serves that were admitted by another program, where "
        "the replay agrees; off: only outlast resume moves them.",
        choices=("on", "off"),
    )

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None and f.default is None:
                continue
            try:
                SPECS[f.name].validate(value)
            except ValueError as exc:
                raise ConfigError(f"{env_var(f.name)} {exc}") from None

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

    @property
    def slow_after(self) -> float:
        """Seconds past which a Postgres round trip is *slow*: ``slow_round_trip``, or a tenth of
        the lease TTL if less (a lease needs about ten round trips: the fault tests lost none at
        ten, and left runs in doubt at four)."""
        return min(self.slow_round_trip, self.lease_ttl / 10)

    def with_(self, **overrides: Any) -> Settings:
        """A copy with the given fields replaced (None means: keep), checked again."""
        return replace(self, **{k: v for k, v in overrides.items() if v is not None})


# Each setting's declaration, by name.
SPECS: dict[str, Spec] = {f.name: f.metadata["spec"] for f in fields(Settings)}


def _from_text(name: str, raw: str) -> Any:
    """An environment variable's text, typed for the setting ``name``."""
    if name == "home":
        return Path(raw)
    if not SPECS[name].unit:
        return raw
    try:
        return SPECS[name].validate(raw)
    except ValueError as exc:
        raise ConfigError(f"{env_var(name)} {exc}") from None
