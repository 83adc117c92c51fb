"""This family holds the commands that pause runs and let them go on: pause, unpause, pauses."""

from __future__ import annotations

import click

from outlast.cli.common import shown, with_client
from outlast.cli.group import cli
from outlast.identity import cli_principal


def _scoped(f: click.decorators.FC) -> click.decorators.FC:
    f = click.option("--queue", metavar="Q", help="Every run of queue Q, those admitted later included.")(f)
    f = click.option(
        "--workflow", metavar="W", help="Every run of workflow W, those admitted later included."
    )(f)
    return click.argument("run_id", required=False)(f)


@cli.command()
@_scoped
@click.option("--why", default="", help="Why (shown with the paused runs: outlast status, the run page).")
@click.pass_context
def pause(ctx: click.Context, run_id: str | None, workflow: str | None, queue: str | None, why: str) -> None:
    """Pause a run, every run of a workflow (--workflow W) or of a queue (--queue Q): each stops at
    its next crossing (a call in flight finishes and is journaled) and waits, holding no worker; a
    run of a paused workflow admitted later waits before its first crossing. outlast unpause lets
    them go on."""
    me = cli_principal()
    p = with_client(ctx, lambda c: c.pause(run_id, workflow=workflow, queue=queue, why=why, principal=me))
    what = f"run {p['target']}" if p["scope"] == "run" else f"every run of {p['scope']} {p['target']}"
    click.echo(shown(f"{what} paused by {me.name}: each stops at its next crossing"))


@cli.command()
@_scoped
@click.pass_context
def unpause(ctx: click.Context, run_id: str | None, workflow: str | None, queue: str | None) -> None:
    """Lift a pause (of a run, --workflow W or --queue Q): the runs it stopped that no other pause
    holds are queued again and go on from where they stopped, their journal replayed."""
    me = cli_principal()
    ids = with_client(ctx, lambda c: c.unpause(run_id, workflow=workflow, queue=queue, principal=me))
    target = run_id or workflow or queue
    click.echo(
        shown(
            f"pause of {target} lifted; runs queued again: {len(ids)}" + "".join(f"\n  {i}" for i in ids),
            keep="\n",
        )
    )


@cli.command()
@click.pass_context
def pauses(ctx: click.Context) -> None:
    """The pauses in force: what each holds, who paused it, when and why."""
    for p in with_client(ctx, lambda c: c.pauses()):
        by = p.get("by", {}).get("principal", "?")
        click.echo(shown(f"{p['scope']:<9} {p['target']:<24} by {by} at {p['at'][:19]}: {p['why'] or '-'}"))
