"""This family holds the commands about the fleet: health, workers, queues, fleet, dead-letters."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from outlast.cli.common import option, queue_name, settings_of, with_client
from outlast.cli.group import cli
from outlast.producer import AsyncClient


@cli.command()
@click.option("--worker", is_flag=True, help="Also require a live worker heartbeat.")
@click.pass_context
def health(ctx: click.Context, worker: bool) -> None:
    """Exit 0 when Postgres and Redis answer and the schema is current (and, with --worker, a live
    worker heartbeat exists); otherwise exit 1 with the reason."""
    fine, wrong = with_client(ctx, lambda c: c.health(worker), connect=False)
    if wrong:
        raise click.ClickException("unhealthy: " + "; ".join(wrong))
    click.echo("healthy: " + ", ".join(fine))


@cli.command()
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def workers(ctx: click.Context, as_json: bool) -> None:
    """The workers' heartbeat records: host, pid, queues, runs held, started, last beat, programs;
    a worker silent for three lease TTLs is shown as gone."""
    from outlast._fleet import render_workers

    rows = with_client(ctx, lambda c: c.workers())
    click.echo(json.dumps(rows, indent=2, default=str) if as_json else render_workers(rows))


@cli.command()
@click.argument("names", nargs=-1, metavar="[QUEUE]...")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def queues(ctx: click.Context, names: tuple[str, ...], as_json: bool) -> None:
    """Each queue's stream (length, pending, oldest pending age, dead letters) and unfinished runs
    (default: every queue with unfinished runs or a worker)."""
    from outlast._fleet import render_queues

    wanted = [queue_name(n, "QUEUE") for n in names]
    rows = with_client(ctx, lambda c: c.queues(wanted), connect=False)
    click.echo(json.dumps(rows, indent=2) if as_json else render_queues(rows))


@cli.command()
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def fleet(ctx: click.Context, as_json: bool) -> None:
    """The fleet at a glance: the workers, the queues, and the runs parked until a person acts
    (a bug, a program no worker serves, a replay that diverged, a pause), counted per workflow
    and reason, each with its way out."""
    from outlast._fleet import render_parked, render_queues, render_workers

    async def read(c: AsyncClient) -> dict[str, Any]:
        return {"workers": await c.workers(), "queues": await c.queues(), "parked": await c.parked()}

    view = with_client(ctx, read)
    if as_json:
        click.echo(json.dumps(view, indent=2, default=str))
        return
    shown = (render_workers(view["workers"]), render_queues(view["queues"]), render_parked(view["parked"]))
    click.echo("\n\n".join(shown))


@cli.command(name="dead-letters")
@option("queue", "--queue", "-q")
@click.option("--requeue", "requeue_id", metavar="ID", help="Requeue this letter's run (Postgres first).")
@click.option("--all", "requeue_all", is_flag=True, help="Requeue every dead letter of the queue.")
@click.option("--drop", "drop_id", metavar="ID", help="Remove this dead letter.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def dead_letters(ctx: click.Context, /, queue: str | None, as_json: bool, **act: Any) -> None:
    """The queue's dead letters; --requeue ID or --all puts their runs back (a final run's letter
    is only dropped), --drop ID removes one."""
    from outlast._fleet import is_entry_id

    q = queue_name(queue or settings_of(ctx).queue, "--queue")
    given = [k for k, v in act.items() if v]
    if len(given) > 1:
        raise click.UsageError("give one of --requeue ID, --all, --drop ID")
    entry = act["requeue_id"] or act["drop_id"]
    if entry is not None and not is_entry_id(entry):
        raise click.BadParameter(f"{entry[:40]!r} is not a dead letter's id (like 1764511200000-0)")

    async def go(c: AsyncClient) -> int:
        letters = await c.dead_letters(q, count=10_000, entry_id=entry)
        if entry is not None and not letters:
            raise click.ClickException(
                f"no dead letter {entry} on queue '{q}'; list them: outlast dead-letters -q {q}"
            )
        if act["drop_id"]:
            await c.drop_dead_letter(q, entry or "")
            click.echo(f"dead letter {entry}: removed")
            return 0
        if not given:
            _print_dead_letters(letters, q, as_json)
            return 0
        kept = 0
        for letter in letters:
            outcome, message = await c.requeue_dead_letter(q, letter)
            kept += outcome == "kept"
            click.echo(message, err=outcome == "kept")
        return 1 if kept and entry is not None else 0

    sys.exit(with_client(ctx, go))


def _print_dead_letters(letters: list[dict[str, str]], queue: str, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(letters, indent=2, ensure_ascii=False))
        return
    for d in letters:
        fields = {k: v for k, v in d.items() if not k.startswith("_")}
        click.echo(f"{d['_id']}  entry {d.get('_entry', '-')}  {json.dumps(fields, ensure_ascii=False)}")
        click.echo(f"  reason: {d.get('_reason', '-')}")
    if not letters:
        click.echo(f"no dead letters on queue '{queue}'")
