"""This family holds the commands of upkeep: migrate the schema, prune finished runs, the users file."""

from __future__ import annotations

from pathlib import Path

import click

from outlast._model import FINAL_STATES
from outlast.cli.common import option, settings_of, with_client
from outlast.cli.group import cli
from outlast.settings import duration


@cli.command()
@click.pass_context
def migrate(ctx: click.Context) -> None:
    """Create or upgrade the schema (idempotent)."""

    version = with_client(ctx, lambda c: c.migrate(), connect=False)
    click.echo(f"schema '{settings_of(ctx).schema}' at version {version}")


def _age(ctx: click.Context, param: click.Parameter, value: str) -> float:
    try:
        return duration(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


@cli.command()
@click.option(
    "--finished-before",
    "age",
    required=True,
    metavar="AGE",
    callback=_age,
    help="Runs that finished longer ago than this: 30d, 12h, 90m, 45s.",
)
@click.option(
    "--state",
    type=click.Choice(sorted(s.value for s in FINAL_STATES)),
    help="Only finished runs in this state.",
)
@click.option("--dry-run", is_flag=True, help="Count what would be deleted; delete nothing.")
@click.pass_context
def prune(ctx: click.Context, age: float, state: str | None, dry_run: bool) -> None:
    """Delete finished runs with their journal, events, approvals, reservations and artifacts (500 runs per
    transaction); never a run that is not final, a budget a kept run shares, or a run that a kept
    run continues."""
    before, n = with_client(ctx, lambda c: c.prune(age, state=state, dry_run=dry_run))
    counts = (
        f"{n.runs} run(s) finished before {before:%Y-%m-%d %H:%M:%S %Z}: {n.journal} journal entries, "
        f"{n.events} events, {n.approvals} approvals, {n.reservations} reservations, {n.budgets} budgets, "
        f"{n.artifacts} artifacts"
    )
    click.echo(f"would delete {counts} (dry run: nothing deleted)" if dry_run else f"deleted {counts}")


# -- people: the users file ------------------------------------------------------------------


@cli.group()
def users() -> None:
    """The users file (OUTLAST_USERS): who may sign in to the dashboard and the API."""


@users.command(name="add")
@click.argument("name")
@click.option("--group", "groups", multiple=True, help="A group the user is in (repeat for more).")
@option("users", "--users", type=click.Path(dir_okay=False, path_type=Path))
@click.pass_context
def users_add(ctx: click.Context, /, name: str, groups: tuple[str, ...], users: Path | None) -> None:
    """Add NAME to the users file (or give them a new token) and print the token, once. Groups
    give roles in the dashboard: operators (cancel, resume, requeue) and approvers (decide,
    resolve), unless the file's [roles] table says otherwise; everyone else only looks."""
    from outlast.identity import add_user

    configured = settings_of(ctx).users
    path = users or (Path(configured) if configured else None)
    if path is None:
        raise click.UsageError("say which users file: --users PATH or OUTLAST_USERS")
    token = add_user(path, name, groups)
    click.echo(
        f"{name} ({', '.join(sorted(set(groups))) or 'no groups'}) in {path}; their token, shown once:"
    )
    click.echo(token)
    click.echo(
        "It is not stored (only its hash is): hand it over now; a lost token is replaced by adding again."
    )
