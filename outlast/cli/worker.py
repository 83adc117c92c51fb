"""The worker command serves an app's workflows."""

from __future__ import annotations

from typing import Any

import click

from outlast.cli.common import option, settings_of
from outlast.cli.group import cli
from outlast.settings import check_name


@cli.command()
@click.argument("app_spec", metavar="MODULE:APP")
@option("queue", "--queue", "-q", "queues", multiple=True)
@option("concurrency", "--concurrency", "-c")
@click.option(
    "--processes", "-p", type=click.IntRange(1, 1024), default=1, envvar="OUTLAST_PROCESSES", show_envvar=True
)
@option("lease_ttl")
@option("grace")
@option("max_attempts")
@option("worker_name", "--name", "worker_name")
@option("metrics_port")
@option("metrics_host")
@option("trace_payloads")
@option("log_payloads")
@click.pass_context
def worker(
    ctx: click.Context, /, app_spec: str, queues: tuple[str, ...], processes: int, **opts: Any
) -> None:
    """Serve the workflows of MODULE:APP, from each --queue given, else from the default queue and
    each queue a workflow of the app routes to (``@app.workflow(queue=...)``). An app whose tools
    declare secret arguments needs OUTLAST_SECRET_KEY (environment only: never an option, never
    shown)."""
    from outlast.services import resolve
    from outlast.worker import serve

    for q in queues:
        try:
            check_name(q)
        except ValueError as exc:
            raise click.BadParameter(f"a queue name {exc}", param_hint="--queue") from None
    s, note = resolve(settings_of(ctx).with_(**opts))
    if note:
        click.echo(note, err=True)
    serve(app_spec, s, list(queues), processes)
