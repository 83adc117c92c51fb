"""This family holds the command that reads a run's artifacts: ``outlast artifacts``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from outlast.cli.common import shown, with_client
from outlast.cli.group import cli


@cli.command()
@click.argument("run_id")
@click.option("--get", "get", metavar="NAME", help="Download artifact NAME (the latest saved under it).")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="With --get: the file to write (default: stdout).",
)
@click.option(
    "--op", "op_id", metavar="OP", help="With --get or --delete: the artifact of operation OP only."
)
@click.option(
    "--delete",
    "delete",
    metavar="NAME",
    help="Delete artifact NAME (the one way to remove an artifact kept past its run).",
)
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def artifacts(
    ctx: click.Context,
    run_id: str,
    get: str | None,
    output: Path | None,
    op_id: str | None,
    delete: str | None,
    as_json: bool,
) -> None:
    """List the artifacts a run saved (name, operation, size, media type, SHA-256); with --get,
    download one."""
    if get is not None:
        data = with_client(ctx, lambda c: c.artifact(run_id, get, op_id))
        if output is None:
            sys.stdout.buffer.write(data)
        else:
            output.write_bytes(data)
            click.echo(f"{output}: {len(data)} bytes", err=True)
        return
    if delete is not None:
        n = with_client(ctx, lambda c: c.delete_artifact(run_id, delete, op_id))
        click.echo(f"deleted {n} artifact(s) named {delete!r} of run {run_id}")
        return
    found: list[dict[str, Any]] = with_client(ctx, lambda c: c.artifacts(run_id))
    if as_json:
        click.echo(json.dumps(found, indent=2, ensure_ascii=False, default=str))
        return
    if not found:
        click.echo(f"run {run_id} has no artifacts")
        return
    for a in found:
        kept = "  kept" if a["keep"] else ""
        line = f"{a['name']}  {a['op_id']}  {a['size']} B  {a['media_type']}  {a['sha256'][:16]}{kept}"
        click.echo(shown(line))
