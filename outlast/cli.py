"""The ``outlast`` command: one subcommand per task. Settings are parsed once, here."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import click
from click.decorators import FC

from outlast.approvals import refuse_unauthenticated
from outlast.errors import ConfigError, InvalidInput, OutlastError
from outlast.identity import cli_principal
from outlast.journal import MAX_DEPTH
from outlast.logs import configure
from outlast.model import FINAL_STATES, Run
from outlast.producer import AsyncClient
from outlast.producer.checks import MAX_LIST
from outlast.settings import SPECS, Settings, check_name, duration, env_var

T = TypeVar("T")
USAGE = 2  # the exit code of a user's mistake: a bad option, value, input or setting
_NO_ARGS: Any = getattr(click.exceptions, "NoArgsIsHelpError", ())  # click >= 8.2


def _say(message: str) -> None:
    """One line on stderr, however many the message had."""
    click.echo(
        "outlast: error: " + " ".join(line.strip() for line in message.splitlines() if line.strip()), err=True
    )


class _Outlast(click.Group):
    """The command group; its ``main`` turns every user error into one line and an exit code
    (2 for a bad value, 1 for a refusal or an unreachable server), never a traceback."""

    def main(  # type: ignore[override]
        self, args: Sequence[str] | None = None, standalone_mode: bool = True, **extra: Any
    ) -> Any:
        if not standalone_mode:
            return super().main(args, standalone_mode=False, **extra)
        try:
            rv = super().main(args, standalone_mode=False, **extra)
        except _NO_ARGS as exc:
            exc.show()
            sys.exit(exc.exit_code)
        except click.exceptions.Abort:
            click.echo("aborted", err=True)
            sys.exit(130)
        except click.UsageError as exc:
            hint = f" (see: {exc.ctx.command_path} --help)" if exc.ctx is not None else ""
            _say(exc.format_message() + hint)
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            _say(exc.format_message())
            sys.exit(exc.exit_code)
        except (ConfigError, InvalidInput) as exc:
            _say(str(exc))
            sys.exit(USAGE)
        except OutlastError as exc:
            _say(str(exc))
            sys.exit(1)
        except KeyboardInterrupt:
            sys.exit(130)
        sys.exit(rv if isinstance(rv, int) else 0)


def _option(name: str, *decls: str, **kw: Any) -> Callable[[FC], FC]:
    """The option of the setting ``name`` (``--name-with-dashes`` unless ``decls`` say otherwise),
    with its help and ``OUTLAST_*`` variable from the setting's declaration; a number is typed
    and checked against its bounds as it is parsed. Not given, it is None: the setting stands."""
    spec = SPECS[name]

    def check(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        try:
            return value if value is None else spec.validate(value)
        except ValueError as exc:
            raise click.BadParameter(str(exc), ctx, param) from None

    if spec.unit:
        kw |= {"type": int if spec.whole else float, "callback": check}
    elif spec.choices:
        kw["type"] = click.Choice(spec.choices)
    decls = decls or (f"--{name.replace('_', '-')}",)
    return click.option(*decls, envvar=env_var(name), show_envvar=True, help=spec.help, **kw)


def _settings(ctx: click.Context) -> Settings:
    s: Settings = ctx.obj
    return s


def _run(ctx: click.Context, call: Callable[[AsyncClient], Awaitable[T]], connect: bool = True) -> T:
    """Open a client (announcing the embedded default if it serves), ``call`` it, close.
    ``connect=False`` leaves connecting to ``call`` (the client checks what it was given first)."""

    async def go() -> T:
        client = AsyncClient(settings=_settings(ctx))
        if client.note:
            click.echo(client.note, err=True)
        try:
            if connect:
                await client.open()
            return await call(client)
        finally:
            await client.close()

    return asyncio.run(go())


@click.group(cls=_Outlast, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@_option("database_url")
@_option("redis_url")
@_option("schema")
@_option("prefix")
@_option("home", type=click.Path(path_type=Path))
@_option("log_format")
@click.pass_context
def cli(ctx: click.Context, /, **opts: Any) -> None:
    """outlast: runs that outlast the worker that started them."""
    ctx.obj = Settings.from_env(**opts)
    configure(ctx.obj.log_format)


@cli.command()
@click.pass_context
def migrate(ctx: click.Context) -> None:
    """Create or upgrade the schema (idempotent)."""

    version = _run(ctx, lambda c: c.migrate(), connect=False)
    click.echo(f"schema '{_settings(ctx).schema}' at version {version}")


@cli.command()
@click.argument("app_spec", metavar="MODULE:APP")
@_option("queue", "--queue", "-q", "queues", multiple=True)
@_option("concurrency", "--concurrency", "-c")
@click.option(
    "--processes", "-p", type=click.IntRange(1, 1024), default=1, envvar="OUTLAST_PROCESSES", show_envvar=True
)
@_option("lease_ttl")
@_option("grace")
@_option("max_attempts")
@_option("worker_name", "--name", "worker_name")
@_option("metrics_port")
@_option("metrics_host")
@_option("trace_payloads")
@click.pass_context
def worker(
    ctx: click.Context, /, app_spec: str, queues: tuple[str, ...], processes: int, **opts: Any
) -> None:
    """Serve the workflows of MODULE:APP. An app whose tools declare secret arguments needs
    OUTLAST_SECRET_KEY (environment only: never an option, never shown)."""
    from outlast.services import resolve
    from outlast.worker import serve

    for q in queues:
        try:
            check_name(q)
        except ValueError as exc:
            raise click.BadParameter(f"a queue name {exc}", param_hint="--queue") from None
    s, note = resolve(_settings(ctx).with_(**opts))
    if note:
        click.echo(note, err=True)
    serve(app_spec, s, list(queues) or [s.queue], processes)


def _json_arg(text: str | None, what: str) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except RecursionError:
        raise click.BadParameter(f"{what} is nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:  # not JSON, or an integer of thousands of digits
        raise click.BadParameter(f"{what} is not valid JSON: {exc}") from None


def _read_input(text: str | None, path: str | None, limit: int) -> Any:
    """The run's input from --input (``-``: stdin) or --input-file (``-``: stdin); default ``{}``."""
    if text is not None and path is not None:
        raise click.UsageError("give --input or --input-file, not both")
    if text != "-" and path is None:
        return _json_arg("{}" if text is None else text, "--input")
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
    return _json_arg(decoded, what)


@cli.command()
@click.argument("workflow")
@click.option("--input", "input_json", help="The run's input, a JSON object (default {}; '-': read stdin).")
@click.option(
    "--input-file",
    type=click.Path(dir_okay=False, allow_dash=True),
    help="Read the input from this file ('-': stdin), for inputs too large for a command line.",
)
@click.option("--run-id", help="Idempotency: the same id and input return the existing run.")
@_option("queue")
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
    data = _read_input(input_json, opts["input_file"], _settings(ctx).max_payload)
    start_at, delay = _start(opts["start_at"], opts["start_in"])

    async def go(c: AsyncClient) -> Run:
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

    run = _run(ctx, go, connect=False)
    if wait:
        _print_final(run)


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


def _print_final(run: Run) -> None:
    click.echo(f"run {run.id} {run.state}" + (f" ({run.reason})" if run.reason else ""))
    if run.result is not None:
        click.echo(json.dumps(run.result, indent=2, ensure_ascii=False))


@cli.command()
@click.argument("run_id")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def status(ctx: click.Context, run_id: str, as_json: bool) -> None:
    """State, reason, journal chain, pending intentions, in-doubt operations and resolutions."""
    from outlast.status import describe

    info = _run(ctx, lambda c: describe(c, run_id))
    if as_json:
        click.echo(json.dumps(info, indent=2, ensure_ascii=False, default=str))
        return
    from outlast.status import render

    click.echo(render(info))


@cli.command()
@click.option("--state", help="Only runs in this state.")
@click.option("--workflow", help="Only runs of this workflow.")
@click.option("--queue", "-q", help="Only runs of this queue.")
@click.option(
    "--since",
    help="Only runs created since: 30m, 2h, 7d, 2w ago (database clock), or an ISO time (UTC if no offset).",
)
@click.option("--tenant", help="Only runs of this tenant.")
@click.option("--limit", type=click.IntRange(1, MAX_LIST), default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def runs(ctx: click.Context, /, state: str | None, limit: int, as_json: bool, **filters: Any) -> None:
    """The latest runs, newest first."""
    if filters["queue"] is not None:
        _queue_name(filters["queue"], "--queue")
    filters["since"] = _since(filters["since"])
    found = _run(ctx, lambda c: c.runs(state, limit, **filters))
    if as_json:
        click.echo(json.dumps([r.to_dict() for r in found], indent=2, default=str))
        return
    for r in found:
        reason = f" ({r.reason})" if r.reason else ""
        tenant = f"  tenant {r.tenant}" if r.tenant else ""
        click.echo(f"{r.id}  {r.workflow:<20} {r.state}{reason}  {r.created_at:%Y-%m-%d %H:%M:%S}{tenant}")
    if not found:
        click.echo("no runs")


@cli.command()
@click.argument("run_id")
@click.option("--follow", "-f", is_flag=True, help="Keep printing until the run is final.")
@click.pass_context
def events(ctx: click.Context, run_id: str, follow: bool) -> None:
    """What happened to a run."""

    def show(e: dict[str, Any]) -> None:
        detail = json.dumps(e["detail"], ensure_ascii=False) if e["detail"] else ""
        click.echo(f"{e['at']:%H:%M:%S.%f}  {e['kind']:<17} {detail}")

    async def go(c: AsyncClient) -> None:
        if not follow:
            for e in await c.events(run_id):
                show(e)
            return
        async for e in c.follow(run_id):  # woken by Postgres (LISTEN/NOTIFY) at each new event
            show(e)

    _run(ctx, go)


@cli.command(name="export")
@click.argument("run_id")
@click.option("-o", "--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Directory.")
@click.pass_context
def export_(ctx: click.Context, run_id: str, out_dir: str) -> None:
    """Write a debug bundle: events, journal, last state, tool calls, environment."""
    from outlast.bundle import export

    for f in _run(ctx, lambda c: export(c, run_id, Path(out_dir))):
        click.echo(str(f))


@cli.command()
@click.argument("run_id")
@click.pass_context
def verify(ctx: click.Context, run_id: str) -> None:
    """Check the journal's hash chain; exit 1 naming the first bad crossing."""

    async def go(c: AsyncClient) -> tuple[int | None, int]:
        return await c.verify(run_id), (await c.status(run_id)).journal_len

    bad, length = _run(ctx, go)
    if bad is not None:
        click.echo(f"run {run_id}: journal altered at crossing #{bad}", err=True)
        sys.exit(1)
    click.echo(f"run {run_id}: journal verifies ({length} entries)")


@cli.command()
@click.argument("run_id")
@click.argument("operation_id")
@click.option("--executed", "executed", flag_value=True, default=None, help="It happened.")
@click.option("--not-executed", "executed", flag_value=False, help="It did not happen: run it once.")
@click.option("--result", "result_json", help="With --executed: its result, as JSON.")
@click.option("--comment", help="Why (1 to 500 non-blank characters), journaled with your user and host.")
@click.pass_context
def resolve(
    ctx: click.Context,
    run_id: str,
    operation_id: str,
    executed: bool | None,
    result_json: str | None,
    comment: str | None,
) -> None:
    """Say how an in-doubt operation ended, and wake the run."""
    if executed is None:
        raise click.UsageError("say --executed or --not-executed")
    result = _json_arg(result_json, "--result")
    me = cli_principal()
    run = _run(
        ctx,
        lambda c: c.resolve(
            run_id, operation_id, executed=executed, result=result, principal=me, comment=comment
        ),
    )
    click.echo(
        f"run {run.id}: {operation_id} resolved as {'executed' if executed else 'not executed'} "
        f"by {me.name} on {me.where}; {run.state}"
    )


@cli.command()
@click.argument("run_id")
@click.option("--accept-program-change", is_flag=True, help="Migrate the run to the new program.")
@click.pass_context
def resume(ctx: click.Context, run_id: str, accept_program_change: bool) -> None:
    """Put a waiting run back in the queue (after a refusal was dealt with)."""
    run = _run(ctx, lambda c: c.resume(run_id, accept_program_change=accept_program_change))
    click.echo(f"run {run.id} {run.state}")


def _shown_and_confirmed(ctx: click.Context, run_id: str, approval_id: str, kind: str, approver: str) -> str:
    """``--yes-i-saw``: show the action (tool, arguments, their hash) and ask, on a terminal
    only, for confirmation; return the hash confirmed."""
    if not sys.stdin.isatty():
        raise click.UsageError(
            "--yes-i-saw asks for confirmation on a terminal, and stdin is not one: "
            f"pass --args-hash H instead (outlast status {run_id} shows it)"
        )
    req = _run(ctx, lambda c: c.approval(run_id, approval_id))
    refuse_unauthenticated(req, cli_principal(), f"run '{run_id}', approval {approval_id}")
    click.echo(
        f"run {run_id}, approval {approval_id}: {req['status']} (approvers: {', '.join(req['approvers'])})"
    )
    click.echo(f"  action     {req['action']}")
    click.echo(f"  arguments  {json.dumps(req['args'], ensure_ascii=False, sort_keys=True)}")
    click.echo(f"  hash       {req['args_hash']}")
    if not click.confirm(f"{kind} this action as {approver}?", default=False):
        raise click.ClickException(f"run {run_id}: {approval_id} not decided (you did not confirm)")
    seen: str = req["args_hash"]
    return seen


def _decision_command(kind: str, doc: str) -> None:
    @click.argument("run_id")
    @click.argument("approval_id")
    @click.option(
        "--as",
        "approver",
        required=True,
        help="The approver you decide as (one of the request's); your user and host are recorded beside it.",
    )
    @click.option("--comment", required=True, help="Why: 1 to 500 non-blank characters.")
    @click.option(
        "--args-hash",
        help="The hash of the arguments you saw (outlast status RUN shows it)"
        + ("." if kind != "reject" else "; default: the request's, shown."),
    )
    @click.option(
        "--yes-i-saw",
        is_flag=True,
        help="Instead of --args-hash: show the action and ask to confirm it (on a terminal only).",
    )
    @click.pass_context
    def command(
        ctx: click.Context,
        /,
        run_id: str,
        approval_id: str,
        approver: str,
        comment: str,
        args_hash: str | None,
        yes_i_saw: bool,
        **kw: Any,
    ) -> None:
        new_args = _json_arg(kw.get("args_json"), "--args")
        if kind == "revise" and not isinstance(new_args, dict):
            raise click.UsageError("revise needs --args with the new arguments, a JSON object")
        if args_hash is not None and yes_i_saw:
            raise click.UsageError("give --args-hash or --yes-i-saw, not both")
        if args_hash is None and yes_i_saw:
            args_hash = _shown_and_confirmed(ctx, run_id, approval_id, kind, approver)
        elif args_hash is None and kind != "reject":
            raise click.UsageError(
                f"{kind} needs --args-hash H, the hash of the arguments you saw (outlast status {run_id} "
                "shows it), or --yes-i-saw to be shown the action and confirm it"
            )
        me = cli_principal()

        async def go(c: AsyncClient) -> Run:
            seen = args_hash
            if seen is None:  # reject: refusing an action needs no proof of what it was
                req = await c.approval(run_id, approval_id)
                click.echo(
                    f"{approval_id}: {req['action']}({json.dumps(req['args'])}) hash {req['args_hash'][:16]}"
                )
                seen = req["args_hash"]
            common: dict[str, Any] = {
                "principal": me,
                "approver": approver,
                "comment": comment,
                "args_hash": seen,
            }
            if kind == "approve":
                return await c.approve(run_id, approval_id, **common)
            if kind == "reject":
                return await c.reject(run_id, approval_id, **common)
            return await c.revise(run_id, approval_id, args=new_args, **common)

        run = _run(ctx, go)
        done = {"approve": "approved", "reject": "rejected", "revise": "revised"}[kind]
        click.echo(
            f"run {run.id}: {approval_id} {done} by {approver} (declared by {me.name} on {me.where}); "
            f"the run is {run.state}"
        )

    command.__doc__ = doc
    if kind == "revise":
        command = click.option("--args", "args_json", required=True, help="The new arguments (JSON).")(
            command
        )
    cli.command(name=kind)(command)


_decision_command("approve", "Approve an approval request of RUN.")
_decision_command("reject", "Reject an approval request of RUN (the run ends failed unless it handles it).")
_decision_command("revise", "Revise a request with new arguments (they need a new approval).")


@cli.command()
@click.argument("run_id")
@click.pass_context
def cancel(ctx: click.Context, run_id: str) -> None:
    """Cancel a run: it stops at its next crossing and runs the compensations it asked for."""
    run = _run(ctx, lambda c: c.cancel(run_id))
    click.echo(f"run {run.id}: cancellation recorded; the run is {run.state}")


@cli.command(name="continue")
@click.argument("run_id")
@click.option("--input", "input_json", help="The new run's input (default: the original's).")
@click.pass_context
def continue_(ctx: click.Context, run_id: str, input_json: str | None) -> None:
    """Start a new run that continues a finished one, with its budget and deadline."""
    data = _json_arg(input_json, "--input")
    if input_json is not None and not isinstance(data, dict):
        raise click.BadParameter(
            "must be a JSON object (omit it to reuse the original's input)", param_hint="--input"
        )
    run = _run(ctx, lambda c: c.continue_run(run_id, data))
    click.echo(f"run {run.id} {run.state} (continues {run_id})")


def _age(ctx: click.Context, param: click.Parameter, value: str) -> float:
    try:
        return duration(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


@cli.command()
@click.option(
    "--finished-before",
    "age",
    required=True,
    metavar="AGE",
    callback=_age,
    help="Runs that finished longer ago than this: 30d, 12h, 90m, 45s.",
)
@click.option(
    "--state",
    type=click.Choice(sorted(s.value for s in FINAL_STATES)),
    help="Only finished runs in this state.",
)
@click.option("--dry-run", is_flag=True, help="Count what would be deleted; delete nothing.")
@click.pass_context
def prune(ctx: click.Context, age: float, state: str | None, dry_run: bool) -> None:
    """Delete finished runs with their journal, events, approvals and reservations (500 runs per
    transaction); never a run that is not final, a budget a kept run shares, or a run that a kept
    run continues."""
    before, n = _run(ctx, lambda c: c.prune(age, state=state, dry_run=dry_run))
    counts = (
        f"{n.runs} run(s) finished before {before:%Y-%m-%d %H:%M:%S %Z}: {n.journal} journal entries, "
        f"{n.events} events, {n.approvals} approvals, {n.reservations} reservations, {n.budgets} budgets"
    )
    click.echo(f"would delete {counts} (dry run: nothing deleted)" if dry_run else f"deleted {counts}")


@cli.command()
@click.option("--stop", is_flag=True, help="Stop the embedded servers.")
@click.option("--purge", is_flag=True, help="Stop them and delete their data (the home directory).")
@click.pass_context
def dev(ctx: click.Context, stop: bool, purge: bool) -> None:
    """Start the embedded Postgres and Redis and print the URLs to export."""
    from outlast import embedded

    home = _settings(ctx).home
    if stop or purge:
        for line in embedded.stop(home, purge=purge) or ["nothing was running"]:
            click.echo(line)
        return
    db, redis, how = embedded.ensure(home)
    click.echo(f"# {how}")
    click.echo(f"export OUTLAST_DATABASE_URL={db}")
    click.echo(f"export OUTLAST_REDIS_URL={redis}")


@cli.command()
@click.pass_context
def demo(ctx: click.Context) -> None:
    """The story in under 30 seconds, on the embedded default (or the configured servers)."""
    from outlast.demo import main as demo_main

    demo_main(_settings(ctx))


# -- people: the users file ------------------------------------------------------------------


@cli.group()
def users() -> None:
    """The users file (OUTLAST_USERS): who may sign in to the dashboard and the API."""


@users.command(name="add")
@click.argument("name")
@click.option("--group", "groups", multiple=True, help="A group the user is in (repeat for more).")
@_option("users", "--users", type=click.Path(dir_okay=False, path_type=Path))
@click.pass_context
def users_add(ctx: click.Context, /, name: str, groups: tuple[str, ...], users: Path | None) -> None:
    """Add NAME to the users file (or give them a new token) and print the token, once. Groups
    give roles in the dashboard: operators (cancel, resume, requeue) and approvers (decide,
    resolve), unless the file's [roles] table says otherwise; everyone else only looks."""
    from outlast.identity import add_user

    configured = _settings(ctx).users
    path = users or (Path(configured) if configured else None)
    if path is None:
        raise click.UsageError("say which users file: --users PATH or OUTLAST_USERS")
    token = add_user(path, name, groups)
    click.echo(
        f"{name} ({', '.join(sorted(set(groups))) or 'no groups'}) in {path}; their token, shown once:"
    )
    click.echo(token)
    click.echo(
        "It is not stored (only its hash is): hand it over now; a lost token is replaced by adding again."
    )


# -- the fleet: health, workers, queues, dead letters ----------------------------------------


def _queue_name(name: str, hint: str) -> str:
    try:
        return check_name(name)
    except ValueError as exc:
        raise click.BadParameter(f"a queue name {exc}", param_hint=hint) from None


def _since(text: str | None) -> datetime | timedelta | None:
    """``--since``: an age (``90s``, ``30m``, ``2h``, ``7d``, ``2w``: by the database clock) or an
    ISO time (UTC if naive)."""
    if text is None:
        return None
    if text[-1:] in ("s", "m", "h", "d", "w") and text[:-1].replace(".", "", 1).isdigit():
        try:
            return timedelta(seconds=duration(text))
        except ValueError:
            raise click.BadParameter(
                f"{text[:40]!r} is too far back, or zero: an age is at most 36500d", param_hint="--since"
            ) from None
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        raise click.BadParameter(
            f"{text[:40]!r} is neither an age (30m, 2h, 7d) nor an ISO time (2026-11-30T14:00)",
            param_hint="--since",
        ) from None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


@cli.command()
@click.option("--worker", is_flag=True, help="Also require a live worker heartbeat.")
@click.pass_context
def health(ctx: click.Context, worker: bool) -> None:
    """Exit 0 when Postgres and Redis answer and the schema is current (and, with --worker, a live
    worker heartbeat exists); otherwise exit 1 with the reason."""
    fine, wrong = _run(ctx, lambda c: c.health(worker), connect=False)
    if wrong:
        raise click.ClickException("unhealthy: " + "; ".join(wrong))
    click.echo("healthy: " + ", ".join(fine))


@cli.command()
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def workers(ctx: click.Context, as_json: bool) -> None:
    """The workers' heartbeat records: host, pid, queues, runs held, started, last beat, programs;
    a worker silent for three lease TTLs is shown as gone."""
    from outlast.fleet import render_workers

    rows = _run(ctx, lambda c: c.workers())
    click.echo(json.dumps(rows, indent=2, default=str) if as_json else render_workers(rows))


@cli.command()
@click.argument("names", nargs=-1, metavar="[QUEUE]...")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def queues(ctx: click.Context, names: tuple[str, ...], as_json: bool) -> None:
    """Each queue's stream (length, pending, oldest pending age, dead letters) and unfinished runs
    (default: every queue with unfinished runs or a worker)."""
    from outlast.fleet import render_queues

    wanted = [_queue_name(n, "QUEUE") for n in names]
    rows = _run(ctx, lambda c: c.queues(wanted), connect=False)
    click.echo(json.dumps(rows, indent=2) if as_json else render_queues(rows))


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
        run = _run(ctx, lambda c: c.trigger_schedule(trigger))
        click.echo(f"schedule {trigger}: run {run.id} {run.state}")
        return
    if pause is not None or resume is not None:
        name = pause or resume or ""
        _run(ctx, lambda c: c.pause_schedule(name, paused=pause is not None))
        click.echo(f"schedule {name} {'paused' if pause else 'resumed'}")
        return
    rows = _run(ctx, lambda c: c.schedules())
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


@cli.command(name="dead-letters")
@_option("queue", "--queue", "-q")
@click.option("--requeue", "requeue_id", metavar="ID", help="Requeue this letter's run (Postgres first).")
@click.option("--all", "requeue_all", is_flag=True, help="Requeue every dead letter of the queue.")
@click.option("--drop", "drop_id", metavar="ID", help="Remove this dead letter.")
@click.option("--json", "as_json", is_flag=True)
@click.pass_context
def dead_letters(ctx: click.Context, /, queue: str | None, as_json: bool, **act: Any) -> None:
    """The queue's dead letters; --requeue ID or --all puts their runs back (a final run's letter
    is only dropped), --drop ID removes one."""
    from outlast.fleet import is_entry_id

    q = _queue_name(queue or _settings(ctx).queue, "--queue")
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

    sys.exit(_run(ctx, go))


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


# -- the dashboard ---------------------------------------------------------------------------


@cli.command()
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    envvar="OUTLAST_DASHBOARD_HOST",
    show_envvar=True,
    help="Address to listen on (beyond loopback only with users).",
)
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    default=8321,
    show_default=True,
    envvar="OUTLAST_DASHBOARD_PORT",
    show_envvar=True,
    help="Port to listen on.",
)
@click.option(
    "--app",
    "app_spec",
    metavar="MODULE:APP",
    help="The application, to check revised arguments against its tools (optional).",
)
@click.option(
    "--root-path",
    default="",
    envvar="OUTLAST_DASHBOARD_ROOT_PATH",
    show_envvar=True,
    help="The path prefix a reverse proxy serves the dashboard under (e.g. /outlast).",
)
@click.pass_context
def dashboard(ctx: click.Context, host: str, port: int, app_spec: str | None, root_path: str) -> None:
    """The web page and JSON API: runs, approvals, in-doubt operations, the fleet. Needs the
    dashboard extra (pip install 'outlast[dashboard]') and users (OUTLAST_USERS) to sign in."""
    try:
        import uvicorn

        from outlast.dashboard import create_app
        from outlast.dashboard.auth import check_bind
    except ImportError as exc:
        raise click.ClickException(
            f"the dashboard needs {exc.name}: pip install 'outlast[dashboard]'"
        ) from None
    settings = _settings(ctx)
    check_bind(host, settings)
    if root_path and (not root_path.startswith("/") or root_path.endswith("/")):
        raise click.BadParameter("a path like /outlast: a leading /, no trailing /", param_hint="--root-path")

    async def reachable(c: AsyncClient) -> None:
        """Postgres answers and the schema is current (Redis is asked when first needed)."""

    _run(ctx, reachable)
    if app_spec:
        from outlast.worker.pool import load_app

        app = create_app(settings, app=load_app(app_spec))
    else:
        app = create_app(settings)
    click.echo(f"outlast dashboard on http://{host}:{port}{root_path}/ (schema {settings.schema})", err=True)
    uvicorn.run(
        app, host=host, port=port, root_path=root_path, log_level="warning", timeout_graceful_shutdown=2
    )


def main() -> None:
    """Entry point: a user's mistake prints one line and exits non-zero, never a traceback."""
    cli.main()
