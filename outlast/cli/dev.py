"""This family holds the commands for trying outlast: the embedded servers (dev) and the demo."""

from __future__ import annotations

import click

from outlast.cli.common import settings_of
from outlast.cli.group import cli


@cli.command()
@click.option("--stop", is_flag=True, help="Stop the embedded servers.")
@click.option("--purge", is_flag=True, help="Stop them and delete their data (the home directory).")
@click.pass_context
def dev(ctx: click.Context, stop: bool, purge: bool) -> None:
    """Start the embedded Postgres and Redis and print the URLs to export."""
    from outlast import _embedded as embedded

    home = settings_of(ctx).home
    if stop or purge:
        for line in embedded.stop(home, purge=purge) or ["nothing was running"]:
            click.echo(line)
        return
    db, redis, how = embedded.ensure(home)
    click.echo(f"# {how}")
    click.echo(f"export OUTLAST_DATABASE_URL={db}")
    click.echo(f"export OUTLAST_REDIS_URL={redis}")


@cli.command()
@click.argument("story", required=False, type=click.Choice(["payments", "agent"]), default="payments")
@click.pass_context
def demo(ctx: click.Context, story: str) -> None:
    """The story in under 30 seconds, on the embedded default (or the configured servers): a
    payment (default), or a pydantic-ai agent (``agent``, needs outlast[agents])."""
    if story == "agent":
        from outlast.demo_agent import main as agent_demo

        agent_demo(settings_of(ctx))
        return
    from outlast.demo import main as demo_main

    demo_main(settings_of(ctx))
