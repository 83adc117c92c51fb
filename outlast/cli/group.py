"""The ``outlast`` command group holds the connection options every command shares, and ``main``,
which turns a user's mistake into one line and an exit code, never a traceback."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from outlast._logs import configure
from outlast.cli.common import option
from outlast.errors import ConfigError, InvalidInput, OutlastError
from outlast.settings import Settings

USAGE = 2  # the exit code of a user's mistake: a bad option, value, input or setting
_NO_ARGS: Any = getattr(click.exceptions, "NoArgsIsHelpError", ())  # click >= 8.2
# The families of commands (one module each, under outlast/cli/): importing one registers its
# commands. ``worker`` is imported with the group; the others when a command is not found among
# those registered, or all are listed (help): `outlast worker` loads no other (~0.8 MB of RSS).
FAMILIES = (
    *("admin", "artifacts", "dashboard", "decisions", "dev", "fleet", "messages"),
    *("pauses", "reads", "replay", "requests", "runs", "schedules", "worker"),
)


def say(message: str) -> None:
    """One line on stderr, however many the message had."""
    click.echo(
        "outlast: error: " + " ".join(line.strip() for line in message.splitlines() if line.strip()), err=True
    )


class _Outlast(click.Group):
    """``_Outlast`` is the command group. Its ``main`` turns every user error into one line and an exit code
    (2 for a bad value, 1 for a refusal or an unreachable server), never a traceback."""

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        found = super().get_command(ctx, cmd_name)
        if found is None:
            _families()
            found = super().get_command(ctx, cmd_name)
        return found

    def list_commands(self, ctx: click.Context) -> list[str]:
        _families()
        return super().list_commands(ctx)

    def main(  # type: ignore[override]
        self, args: Sequence[str] | None = None, standalone_mode: bool = True, **extra: Any
    ) -> Any:
        if not standalone_mode:
            return super().main(args, standalone_mode=False, **extra)
        try:
            rv = super().main(args, standalone_mode=False, **extra)
        except _NO_ARGS as exc:
            exc.show()
            sys.exit(exc.exit_code)
        except click.exceptions.Abort:
            click.echo("aborted", err=True)
            sys.exit(130)
        except click.UsageError as exc:
            hint = f" (see: {exc.ctx.command_path} --help)" if exc.ctx is not None else ""
            say(exc.format_message() + hint)
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            say(exc.format_message())
            sys.exit(exc.exit_code)
        except (ConfigError, InvalidInput) as exc:
            say(str(exc))
            sys.exit(USAGE)
        except OutlastError as exc:
            say(str(exc))
            sys.exit(1)
        except KeyboardInterrupt:
            sys.exit(130)
        sys.exit(rv if isinstance(rv, int) else 0)


@click.group(cls=_Outlast, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@option("database_url")
@option("redis_url")
@option("schema")
@option("prefix")
@option("home", type=click.Path(path_type=Path))
@option("log_format")
@click.pass_context
def cli(ctx: click.Context, /, **opts: Any) -> None:
    """outlast: runs that outlast the worker that started them."""
    ctx.obj = Settings.from_env(**opts)
    configure(ctx.obj.log_format)


def _families() -> None:
    for name in FAMILIES:
        importlib.import_module(f"outlast.cli.{name}")


def main() -> None:
    """Entry point: a user's mistake prints one line and exits non-zero, never a traceback."""
    cli.main()
