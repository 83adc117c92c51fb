"""The replay command tells whether a code change is safe for the runs in flight, before a deploy."""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import asdict
from pathlib import Path

import click

from outlast._model import RunState
from outlast.cli.common import parse_since, settings_of, with_client
from outlast.cli.group import cli


@cli.command()
@click.argument("targets", nargs=-1, metavar="[BUNDLE] MODULE:APP")
@click.option("--workflow", help="Replay the runs of this workflow read from Postgres (not a bundle).")
@click.option(
    "--state",
    "states",
    multiple=True,
    type=click.Choice([str(s) for s in RunState]),
    help="With --workflow: only runs in this state (repeatable); default: every unfinished state.",
)
@click.option("--since", help="With --workflow: only runs created since: 30m, 2h, 7d, or an ISO time.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def replay(
    ctx: click.Context,
    /,
    targets: tuple[str, ...],
    workflow: str | None,
    states: tuple[str, ...],
    since: str | None,
    as_json: bool,
) -> None:
    """Replay runs against the code of MODULE:APP, with no effect: a bundle (`outlast export`), with
    no services, or with --workflow every unfinished run of it, read-only, from Postgres (the runs a
    deploy would resume). Prints where each run stopped and the first divergence of a changed
    workflow: the crossing, what the journal has, what the code asks (with both arguments hashes).
    Exits 1 if any run diverges or its journal does not verify. Needs OUTLAST_SECRET_KEY (the
    workers' key) when the app declares secret arguments."""
    from outlast._replay import UNFINISHED, replay_bundle, replay_workflow, table
    from outlast.worker.pool import load_app

    wanted = 1 if workflow else 2
    if len(targets) != wanted:
        shape = (
            "MODULE:APP (with --workflow)" if workflow else "BUNDLE MODULE:APP (or --workflow W MODULE:APP)"
        )
        raise click.UsageError(f"replay takes {shape}")
    if (states or since) and not workflow:
        raise click.UsageError("--state and --since choose runs from Postgres: give --workflow too")
    app = load_app(targets[-1])
    key = settings_of(ctx).secret_key
    if workflow is None:
        reports = [asyncio.run(replay_bundle(Path(targets[0]), app, secret_key=key))]
    else:
        chosen, age = states or tuple(str(s) for s in UNFINISHED), parse_since(since)
        reports = with_client(
            ctx, lambda c: replay_workflow(c, app, workflow, states=chosen, since=age, secret_key=key)
        )
    if as_json:
        click.echo(json.dumps([asdict(r) for r in reports], indent=2, ensure_ascii=False))
    elif workflow is None:
        click.echo(str(reports[0]))
    else:
        click.echo(table(reports))
    if not all(r.agrees for r in reports):
        sys.exit(1)
