"""This family holds the commands that read a run: status, runs, events, export, verify."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import click

from outlast._listing import MAX_PAGE, SORTS, RunQuery
from outlast._model import PRIORITIES
from outlast.cli.common import parse_since, queue_name, shown, with_client
from outlast.cli.group import cli
from outlast.producer import AsyncClient


@cli.command()
@click.argument("run_id")
@click.option(
    "--op", "op_id", metavar="OP", help="One operation: its entries, and the request it sent if captured."
)
@click.option(
    "--generation",
    type=int,
    metavar="K",
    help="A run carried forward: show generation K of its journal (default: the current one).",
)
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def status(ctx: click.Context, run_id: str, op_id: str | None, generation: int | None, as_json: bool) -> None:
    """State, reason, journal chain, pending intentions, in-doubt operations and resolutions;
    with --op, one operation (what a model tool sent, as it left the process)."""
    from outlast._status import describe

    if op_id is not None:
        _operation(ctx, run_id, op_id, as_json, generation)
        return
    info = with_client(ctx, lambda c: describe(c, run_id, generation))
    if as_json:
        click.echo(json.dumps(info, indent=2, ensure_ascii=False, default=str))
        return
    from outlast._status import render

    click.echo(shown(render(info), keep="\n"))


def _operation(ctx: click.Context, run_id: str, op_id: str, as_json: bool, generation: int | None) -> None:
    from outlast._status import operation, render_operation

    async def go(c: AsyncClient) -> dict[str, Any] | None:
        return operation(await c.journal(run_id, generation), op_id)

    op = with_client(ctx, go)
    if op is None:
        raise click.BadParameter(f"run {run_id} has no operation {op_id} in its journal", param_hint="--op")
    click.echo(json.dumps(op, indent=2, ensure_ascii=False) if as_json else render_operation(run_id, op))


@cli.command()
@click.option("--state", help="Only runs in this state.")
@click.option("--workflow", help="Only runs of this workflow.")
@click.option("--queue", "-q", help="Only runs of this queue.")
@click.option(
    "--since",
    help="Only runs created since: 30m, 2h, 7d, 2w ago, or an ISO time (UTC if no offset); with "
    "--sort, the sort's time.",
)
@click.option("--until", help="Only runs created before this ISO time (with --sort, the sort's time).")
@click.option("--tenant", help="Only runs of this tenant.")
@click.option("--priority", type=click.Choice(PRIORITIES), help="Only runs of this priority.")
@click.option("--parent", help="Only the child runs this run started.")
@click.option("--in-doubt", is_flag=True, help="Only runs waiting on an operation in doubt.")
@click.option("--prefix", help="Only runs whose id starts with this (listed in id order).")
@click.option(
    "--input", "input_json", metavar="JSON", help='Only runs whose input contains this object: {"k": "v"}.'
)
@click.option(
    "--sort", type=click.Choice(SORTS), default="created", show_default=True, help="Newest first by."
)
@click.option("--cursor", help="The page after the one that printed this cursor.")
@click.option("--limit", type=click.IntRange(1, MAX_PAGE), default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def runs(ctx: click.Context, /, limit: int, as_json: bool, cursor: str | None, **given: Any) -> None:
    """A page of runs, newest first; each option narrows it (the same filters as the dashboard's
    runs list and /api/runs). More pages: the cursor printed at the end (--cursor)."""
    if given["queue"] is not None:
        queue_name(given["queue"], "--queue")
    since = parse_since(given.pop("since"))
    try:
        until = parse_since(given.pop("until"))
    except click.BadParameter as exc:
        exc.param_hint = "--until"
        raise
    input_json = given.pop("input_json")
    try:
        wanted = json.loads(input_json) if input_json else {}
    except ValueError:
        raise click.BadParameter(f"{input_json[:40]!r} is not JSON", param_hint="--input") from None

    def query() -> RunQuery:  # made inside the client's call: a refusal is said in one line
        return RunQuery(
            **{
                k: given[k]
                for k in ("state", "workflow", "queue", "tenant", "priority", "parent", "in_doubt")
            },
            since=datetime.now(UTC) - since if isinstance(since, timedelta) else since,
            until=datetime.now(UTC) - until if isinstance(until, timedelta) else until,
            id_prefix=given["prefix"],
            input=wanted,
            sort=given["sort"],
        )

    found, after = with_client(ctx, lambda c: c.runs_page(query(), limit=limit, cursor=cursor))
    if as_json:
        click.echo(json.dumps([r.to_dict() for r in found], indent=2, default=str))
    else:
        # Columns as wide as the page's longest id, workflow and state (a child's id is long).
        states = [r.state + (f" ({r.reason})" if r.reason else "") for r in found]
        wide = [
            max(map(len, col), default=0)
            for col in ([r.id for r in found], [r.workflow for r in found], states)
        ]
        for r, state_ in zip(found, states, strict=True):
            tenant = f"  tenant {r.tenant}" if r.tenant else ""
            click.echo(
                shown(
                    f"{r.id:<{wide[0]}}  {r.workflow:<{wide[1]}}  {state_:<{wide[2]}}  "
                    f"{r.created_at:%Y-%m-%d %H:%M:%S}{tenant}"
                )
            )
        if not found:
            click.echo("no runs")
    if after is not None:
        click.echo(f"more: the same command with --cursor {after}", err=True)


@cli.command()
@click.argument("run_id")
@click.option("--follow", "-f", is_flag=True, help="Keep printing until the run is final.")
@click.option("--after", type=click.IntRange(min=0), default=0, help="Only events after this id.")
@click.pass_context
def events(ctx: click.Context, run_id: str, follow: bool, after: int) -> None:
    """What happened to a run: outlast's events and its own (custom:KIND), in order, each with its
    id last (--after ID goes on after it)."""

    def show(e: dict[str, Any]) -> None:
        detail = json.dumps(e["detail"], ensure_ascii=False) if e["detail"] else ""
        said = f"{detail}  " if detail else ""
        click.echo(f"{e['at']:%H:%M:%S.%f}  {e['kind']:<17} {shown(said)}(id {e['id']})")

    async def go(c: AsyncClient) -> None:
        if not follow:
            for e in await c.events(run_id, after):
                show(e)
            return
        async for e in c.follow(run_id, after):  # woken by Postgres (LISTEN/NOTIFY) at each new event
            show(e)

    with_client(ctx, go)


@cli.command()
@click.argument("run_id")
@click.argument("key", required=False)
@click.option(
    "--wait", "wait_after", type=int, metavar="VERSION", help="Wait for a version of KEY newer than this."
)
@click.option("--timeout", type=click.FloatRange(min=0), default=None, help="Seconds --wait waits at most.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def state(
    ctx: click.Context,
    run_id: str,
    key: str | None,
    wait_after: int | None,
    timeout: float | None,
    as_json: bool,
) -> None:
    """The state a run shows (run.set_state): every key, or KEY, with its version."""
    if wait_after is not None and key is None:
        raise click.BadParameter("--wait needs a KEY", param_hint="--wait")

    async def go(c: AsyncClient) -> Any:
        if wait_after is not None and key is not None:
            return await c.wait_state(run_id, key, after_version=wait_after, timeout=timeout)
        return await c.state(run_id, key)

    got = with_client(ctx, go)
    values = got if isinstance(got, dict) else {} if got is None else {got.key: got}
    if key is not None and got is None:
        raise click.ClickException(f"run {run_id} shows no state '{key}' (every key: outlast state {run_id})")
    if as_json:
        asked = {k: {"value": v.value, "version": v.version} for k, v in values.items()}
        click.echo(json.dumps(asked, indent=2, ensure_ascii=False))
        return
    for k, v in values.items():
        click.echo(shown(f"{k}  v{v.version}  {json.dumps(v.value, ensure_ascii=False)}"))
    if not values:
        click.echo("no state")


@cli.command()
@click.argument("run_id")
@click.pass_context
def stream(ctx: click.Context, run_id: str) -> None:
    """Print a run's live output as it comes (the recent chunks first), then how it ended. Live
    output is at most once: a chunk lost with its worker is not shown."""
    from outlast._model import Chunk

    async def go(c: AsyncClient) -> None:
        async for item in c.stream(run_id):
            if isinstance(item, Chunk):
                text = item.data if isinstance(item.data, str) else json.dumps(item.data, ensure_ascii=False)
                click.echo(shown(text, keep="\n\t"), nl=not isinstance(item.data, str))
                sys.stdout.flush()
            else:
                ended = f"{item.id} {item.state}" + (f" ({item.reason})" if item.reason else "")
                click.echo("\n" + shown(ended))

    with_client(ctx, go)


@cli.command(name="export")
@click.argument("run_id")
@click.option("-o", "--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Directory.")
@click.pass_context
def export_(ctx: click.Context, run_id: str, out_dir: str) -> None:
    """Write a debug bundle: events, journal, last state, tool calls, environment."""
    from outlast._bundle import export

    for f in with_client(ctx, lambda c: export(c, run_id, Path(out_dir))):
        click.echo(str(f))


@cli.command()
@click.argument("run_id")
@click.pass_context
def verify(ctx: click.Context, run_id: str) -> None:
    """Check the journal's hash chain, each generation's kept; exit 1 naming the first bad crossing."""

    async def go(c: AsyncClient) -> list[tuple[int, int | None, int]]:
        kept = await c.generations(run_id)
        return [(g["generation"], await c.verify(run_id, g["generation"]), g["journal_len"]) for g in kept]

    checked = with_client(ctx, go)
    for generation, bad, length in checked:
        which = f" generation {generation}" if len(checked) > 1 else ""
        if bad is not None:
            click.echo(f"run {run_id}:{which} journal altered at crossing #{bad}", err=True)
            sys.exit(1)
        click.echo(f"run {run_id}:{which} journal verifies ({length} entries)")
