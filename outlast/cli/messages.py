"""This module holds the commands of messages into runs: ``send``."""

from __future__ import annotations

import click

from outlast._model import Receipt
from outlast.cli.common import json_arg, with_client
from outlast.cli.group import cli
from outlast.producer import AsyncClient


@cli.command()
@click.argument("run_id")
@click.argument("channel")
@click.argument("payload_json", metavar="JSON")
@click.option("--id", "message_id", help="The message's id: the same id sent again is the same message.")
@click.option(
    "--app",
    "app_spec",
    metavar="MODULE:APP",
    help=(
        "The app whose workflow declares typed channels: the message is validated by its type too (without "
        "it, by the JSON schema the workers published), before it is stored."
    ),
)
@click.pass_context
def send(
    ctx: click.Context,
    run_id: str,
    channel: str,
    payload_json: str,
    message_id: str | None,
    app_spec: str | None,
) -> None:
    """Send a message (JSON) on CHANNEL of the run: kept until the run takes it, and the run
    woken if it waits on that channel."""
    payload = json_arg(payload_json, "the message")
    app = None
    if app_spec:
        from outlast.worker.pool import load_app

        app = load_app(app_spec)

    async def go(c: AsyncClient) -> Receipt:
        c.app = app or c.app
        return await c.send(run_id, channel, payload, message_id)

    receipt = with_client(ctx, go)
    again = " (already sent: the first send's receipt)" if receipt.duplicate else ""
    click.echo(
        f"run {run_id}: message {receipt.message_id} #{receipt.seq} on {channel!r} "
        f"accepted at {receipt.sent_at:%Y-%m-%d %H:%M:%S}{again}"
    )
    if receipt.unheard:
        click.echo(
            f"warning: run {run_id} does not wait on {channel!r} now, its workflow declares no channels "
            f"and it never received on {channel!r}: the message stays untaken until a receive on "
            f"{channel!r} (outlast status {run_id} lists it)",
            err=True,
        )
