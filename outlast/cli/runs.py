"""This family holds the commands that make or move runs: enqueue, cancel, continue, resume."""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import datetime
from typing import Any

import click

from outlast._model import RunRecord, RunState
from outlast._status import describe
from outlast.cli.common import json_arg, option, settings_of, shown, with_client
from outlast.cli.group import cli
from outlast.producer import AsyncClient
from outlast.settings import duration


def _read_input(text: str | None, path: str | None, limit: int) -> Any:
    """The run's input from --input (``-``: stdin) or --input-file (``-``: stdin); default ``{}``."""
    if text is not None and path is not None:
        raise click.UsageError("give --input or --input-file, not both")
    if text != "-" and path is None:
        return json_arg("{}" if text is None else text, "--input")
    path = path or "-"
    what = "the input on stdin" if path == "-" else f"the input file {path!r}"
    cap = 8 * limit  # room for indentation; the canonical input must still fit OUTLAST_MAX_PAYLOAD
    try:
        if path == "-":
            raw = sys.stdin.buffer.read(cap + 1)
        else:
            with open(path, "rb") as f:
                raw = f.read(cap + 1)
    except OSError as exc:
        raise click.BadParameter(f"cannot read {path!r}: {exc.strerror}", param_hint="--input-file") from None
    if len(raw) > cap:
        raise click.BadParameter(f"{what} is over {cap} bytes (8 x OUTLAST_MAX_PAYLOAD)")
    try:
        decoded = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise click.BadParameter(f"{what} is not UTF-8 text") from None
    return json_arg(decoded, what)


@cli.command()
@click.argument("workflow")
@click.option("--input", "input_json", help="The run's input, a JSON object (default {}; '-': read stdin).")
@click.option(
    "--input-file",
    type=click.Path(dir_okay=False, allow_dash=True),
    help="Read the input from this file ('-': stdin), for inputs too large for a command line.",
)
@click.option("--run-id", help="Idempotency: the same id and input return the existing run.")
@option("queue")
@click.option("--deadline", type=float, help="Seconds from now (at most ten years).")
@click.option(
    "--at",
    "start_at",
    help="Start no earlier than this ISO 8601 time with its zone (2026-12-01T09:00+01:00).",
)
@click.option("--in", "start_in", help="Start no earlier than this long from now (45s, 90m, 12h, 30d).")
@click.option("--tenant", help="Whose run it is (kept by its continuations and child runs).")
@click.option("--wait", is_flag=True, help="Wait for the run to finish and print its result.")
@click.option(
    "--priority",
    type=click.Choice(["high", "normal", "low"]),
    default="normal",
    show_default=True,
    help="The level of its queue: served 8:3:1 while all are busy, none starved.",
)
@click.pass_context
def enqueue(ctx: click.Context, /, workflow: str, input_json: str | None, wait: bool, **opts: Any) -> None:
    """Enqueue a run of WORKFLOW (delayed with --at or --in: recorded now, delivered at its time)."""
    data = _read_input(input_json, opts["input_file"], settings_of(ctx).max_payload)
    start_at, delay = _start(opts["start_at"], opts["start_in"])

    async def go(c: AsyncClient) -> RunRecord:
        run = await c.enqueue(
            workflow,
            data,
            run_id=opts["run_id"],
            queue=opts["queue"],
            deadline=opts["deadline"],
            start_at=start_at,
            delay=delay,
            priority=opts["priority"],
            tenant=opts["tenant"],
        )
        later = f", starts at {run.start_at:%Y-%m-%d %H:%M:%S %Z}" if run.start_at else ""
        click.echo(f"run {run.id} {run.state}{later}")
        return await c.wait(run.id) if wait else run

    run = with_client(ctx, go, connect=False)
    if wait:
        _print_final(run)
        ctx.exit(FINAL_EXIT.get(run.state, 0))


def _start(at: str | None, within: str | None) -> tuple[datetime | None, float | None]:
    """``--at`` (an ISO 8601 time with its zone) or ``--in`` (a duration), checked."""
    if at is not None and within is not None:
        raise click.UsageError("give --at or --in, not both")
    if within is not None:
        try:
            return None, duration(within)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="'--in'") from None
    if at is None:
        return None, None
    try:
        when = datetime.fromisoformat(at)
    except ValueError:
        when = None
    if when is None or when.tzinfo is None:
        raise click.BadParameter(
            f"must be an ISO 8601 time with its zone, such as 2026-12-01T09:00+01:00 or ...Z, got {at!r}",
            param_hint="'--at'",
        )
    return when, None


# ``enqueue --wait``'s exit code for a run that did not succeed, one per final state (docs/reference/cli.md).
FINAL_EXIT = {
    RunState.PARTIAL: 3,
    RunState.FAILED: 4,
    RunState.TIMED_OUT: 5,
    RunState.EXHAUSTED: 6,
    RunState.CANCELLED: 7,
}


def _print_final(run: RunRecord) -> None:
    click.echo(shown(f"run {run.id} {run.state}" + (f" ({run.reason})" if run.reason else "")))
    if run.result is not None:
        click.echo(json.dumps(run.result, indent=2, ensure_ascii=False))


@cli.command()
@click.argument("run_id", required=False)
@click.option("--accept-program-change", is_flag=True, help="Migrate the run to the new program.")
@click.option("--workflow", help="Resume every parked run of this workflow on the code deployed now.")
@click.option(
    "--wait",
    "wait_s",
    type=click.FloatRange(0, 3600),
    default=60.0,
    show_default=True,
    help="With --workflow: seconds to wait for workers to replay the runs before saying what moved.",
)
@click.pass_context
def resume(
    ctx: click.Context, run_id: str | None, accept_program_change: bool, workflow: str | None, wait_s: float
) -> None:
    """Put a waiting run back in the queue (after a refusal was dealt with). With --workflow W,
    every run of W parked by a program change, a bug or a replay that diverged is resumed on the
    program of the worker that takes it; replay takes each forward only where it agrees with the
    journal crossing for crossing, and the command prints what moved and what did not, and why."""
    if (run_id is None) == (workflow is None):
        raise click.UsageError("give a RUN_ID or --workflow W (one of them)")
    if workflow is not None:
        with_client(ctx, lambda c: _resume_workflow(c, workflow, wait_s))
        return
    assert run_id is not None
    run = with_client(ctx, lambda c: c.resume(run_id, accept_program_change=accept_program_change))
    click.echo(f"run {run.id} {run.state}")


PARKED = {"program_changed", "workflow_error", "resume_impossible"}


async def _resume_workflow(c: AsyncClient, workflow: str, wait_s: float) -> None:
    """Resume the parked runs of ``workflow``, wait up to ``wait_s`` for each to be replayed, and
    say of each whether it moved, stayed (and why), or was not taken yet."""
    ids = await c.resume_workflow(workflow)
    click.echo(shown(f"{len(ids)} parked run(s) of {workflow} resumed"))
    left, outcome = list(ids), dict[str, RunRecord]()
    deadline = asyncio.get_running_loop().time() + wait_s
    while left and asyncio.get_running_loop().time() < deadline:
        for seen in [await c.status(i) for i in left]:
            if seen.state != RunState.QUEUED:
                outcome[seen.id] = seen
        left = [i for i in left if i not in outcome]
        if left:
            await asyncio.sleep(0.5)
    for i in ids:
        run = outcome.get(i)
        if run is None:
            click.echo(
                shown(f"not taken yet: {i} queued (no worker serving {workflow} took it in {wait_s:g} s)")
            )
        elif run.state == RunState.WAITING and run.reason in PARKED:
            why = (await describe(c, i))["message"]
            click.echo(shown(f"stayed: {i} waiting ({run.reason})" + (f": {why}" if why else "")))
        else:
            click.echo(shown(f"moved: {i} {run.state}" + (f" ({run.reason})" if run.reason else "")))


@cli.command()
@click.argument("run_id")
@click.pass_context
def cancel(ctx: click.Context, run_id: str) -> None:
    """Cancel a run: it stops at its next crossing and runs the compensations it asked for."""
    run = with_client(ctx, lambda c: c.cancel(run_id))
    click.echo(f"run {run.id}: cancellation recorded; the run is {run.state}")


@cli.command(name="continue")
@click.argument("run_id")
@click.option("--input", "input_json", help="The new run's input (default: the original's).")
@click.pass_context
def continue_(ctx: click.Context, run_id: str, input_json: str | None) -> None:
    """Start a new run that continues a finished one, with its budget and deadline."""
    data = json_arg(input_json, "--input")
    if input_json is not None and not isinstance(data, dict):
        raise click.BadParameter(
            "must be a JSON object (omit it to reuse the original's input)", param_hint="--input"
        )
    run = with_client(ctx, lambda c: c.continue_run(run_id, data))
    click.echo(f"run {run.id} {run.state} (continues {run_id})")


@cli.command()
@click.argument("run_id")
@click.option(
    "--from", "from_op", required=True, metavar="OP", help="The first operation to run live (op-N)."
)
@click.option("--run-id", "new_id", metavar="ID", help="The new run's id (default: a new one).")
@click.pass_context
def fork(ctx: click.Context, run_id: str, from_op: str, new_id: str | None) -> None:
    """Start a new run from a run's journal up to operation OP: what came before is served from the
    journal (no effect redone, the same keys), OP and what follows run live on the code deployed now."""
    from outlast.identity import cli_principal

    me = cli_principal()
    run = with_client(ctx, lambda c: c.fork(run_id, from_op=from_op, run_id_new=new_id, principal=me))
    click.echo(f"run {run.id} {run.state} (forked from {run_id} at {from_op})")
