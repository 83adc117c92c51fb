"""The schedules command can list, pause, resume or trigger the apps' schedules."""

from __future__ import annotations

import json

import click

from outlast.cli.common import with_client
from outlast.cli.group import cli


@cli.command()
@click.option("--pause", metavar="NAME", help="Pause this schedule: no tick is enqueued until resumed.")
@click.option(
    "--resume", metavar="NAME", help="Resume this schedule from now (the paused ticks are skipped)."
)
@click.option("--trigger", metavar="NAME", help="Enqueue a run of this schedule now, besides its ticks.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def schedules(
    ctx: click.Context, pause: str | None, resume: str | None, trigger: str | None, as_json: bool
) -> None:
    """The schedules declared by the workers' apps (@app.schedule): cron, zone, workflow, catch-up,
    paused or not, last and next tick; or pause, resume or trigger one."""
    if sum(x is not None for x in (pause, resume, trigger)) > 1:
        raise click.UsageError("give one of --pause, --resume, --trigger")
    if trigger is not None:
        run = with_client(ctx, lambda c: c.trigger_schedule(trigger))
        click.echo(f"schedule {trigger}: run {run.id} {run.state}")
        return
    if pause is not None or resume is not None:
        name = pause or resume or ""
        with_client(ctx, lambda c: c.pause_schedule(name, paused=pause is not None))
        click.echo(f"schedule {name} {'paused' if pause else 'resumed'}")
        return
    rows = with_client(ctx, lambda c: c.schedules())
    if as_json:
        click.echo(json.dumps(rows, indent=2, default=str))
        return
    click.echo(
        f"{'NAME':<24} {'CRON':<16} {'ZONE':<16} {'WORKFLOW':<16} {'CATCH-UP':<8} {'STATE':<7} NEXT TICK"
    )
    for r in rows:
        nxt = "-" if r["next_tick"] is None else f"{r['next_tick']:%Y-%m-%d %H:%M:%S %Z}"
        state = "paused" if r["paused"] else "active"
        what = f"{r['name']:<24} {r['cron']:<16} {r['tz']:<16} {r['workflow']:<16}"
        click.echo(f"{what} {r['catch_up']:<8} {state:<7} {nxt}")
