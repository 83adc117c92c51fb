"""Every family of commands shares this module. It holds an option read from a setting's declaration (its
``OUTLAST_*`` variable shown in help), the settings parsed once by the group, a client opened
for one command, the parsing of JSON, queue names and ``--since``, and ``shown``: how text a run's
senders, tools or model shaped is printed."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

import click
from click.decorators import FC

from outlast._journal import MAX_DEPTH
from outlast.settings import SPECS, Settings, check_name, duration, env_var

if TYPE_CHECKING:
    from outlast.producer import AsyncClient

T = TypeVar("T")
# What a terminal may act on rather than show: C0 controls (ESC, CR, BEL...), DEL and C1 controls
# (CSI, OSC as one character), and the invisible format characters (zero-width, line and paragraph
# separators, bidirectional embeddings, overrides and isolates) that make text read otherwise.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff]")


def shown(text: str, keep: str = "") -> str:
    """``text`` as the CLI prints it: each control character written as its escape (``\\x1b``,
    ``\\r``, ``\\u202e``), as the pages show it inert, except those in ``keep`` (a stream's
    newlines and tabs). Every printer of text a run, its senders or its model shaped goes through it."""
    return _CONTROL.sub(lambda m: m[0] if m[0] in keep else m[0].encode("unicode_escape").decode(), text)


def option(name: str, *decls: str, **kw: Any) -> Callable[[FC], FC]:
    """The option of the setting ``name`` (``--name-with-dashes`` unless ``decls`` say otherwise),
    with its help and ``OUTLAST_*`` variable from the setting's declaration; a number is typed
    and checked against its bounds as it is parsed. Not given, it is None: the setting stands."""
    spec = SPECS[name]

    def check(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        try:
            return value if value is None else spec.validate(value)
        except ValueError as exc:
            raise click.BadParameter(str(exc), ctx, param) from None

    if spec.unit:
        kw |= {"type": int if spec.whole else float, "callback": check}
    elif spec.choices:
        kw["type"] = click.Choice(spec.choices)
    decls = decls or (f"--{name.replace('_', '-')}",)
    return click.option(*decls, envvar=env_var(name), show_envvar=True, help=spec.help, **kw)


def settings_of(ctx: click.Context) -> Settings:
    s: Settings = ctx.obj
    return s


def with_client(ctx: click.Context, call: Callable[[AsyncClient], Awaitable[T]], connect: bool = True) -> T:
    """Open a client (announcing the embedded default if it serves), ``call`` it, close.
    ``connect=False`` leaves connecting to ``call`` (the client checks what it was given first)."""

    async def go() -> T:
        from outlast.producer import AsyncClient  # on use: `outlast worker` needs no client

        client = AsyncClient(settings=settings_of(ctx))
        if client.note:
            click.echo(client.note, err=True)
        try:
            if connect:
                await client.open()
            return await call(client)
        finally:
            await client.close()

    return asyncio.run(go())


_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


def _nested_deeper(text: str, limit: int) -> bool:
    """Whether a JSON text opens more than ``limit`` arrays or objects inside each other, read
    without parsing: Python 3.14's json reads far past its recursion limit, so no RecursionError
    tells."""
    depth = 0
    for ch in _JSON_STRING.sub("", text):
        if ch in "[{":
            depth += 1
            if depth > limit:
                return True
        elif ch in "]}":
            depth -= 1
    return False


def json_arg(text: str | None, what: str) -> Any:
    if text is None:
        return None
    try:
        if _nested_deeper(text, MAX_DEPTH):
            raise RecursionError
        return json.loads(text)
    except RecursionError:
        raise click.BadParameter(f"{what} is nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:  # not JSON, or an integer of thousands of digits
        raise click.BadParameter(f"{what} is not valid JSON: {exc}") from None


def queue_name(name: str, hint: str) -> str:
    try:
        return check_name(name)
    except ValueError as exc:
        raise click.BadParameter(f"a queue name {exc}", param_hint=hint) from None


def parse_since(text: str | None) -> datetime | timedelta | None:
    """``--since``: an age (``90s``, ``30m``, ``2h``, ``7d``, ``2w``: by the database clock) or an
    ISO time (UTC if naive)."""
    if text is None:
        return None
    if text[-1:] in ("s", "m", "h", "d", "w") and text[:-1].replace(".", "", 1).isdigit():
        try:
            return timedelta(seconds=duration(text))
        except ValueError:
            raise click.BadParameter(
                f"{text[:40]!r} is too far back, or zero: an age is at most 36500d", param_hint="--since"
            ) from None
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        raise click.BadParameter(
            f"{text[:40]!r} is neither an age (30m, 2h, 7d) nor an ISO time (2026-11-30T14:00)",
            param_hint="--since",
        ) from None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)
