"""This family holds the commands of a person's decision: resolve an in-doubt operation; approve,
reject or revise an approval request."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from outlast._approvals import refuse_unauthenticated
from outlast._model import RunRecord
from outlast.cli.common import json_arg, shown, with_client
from outlast.cli.group import cli
from outlast.identity import cli_principal
from outlast.producer import AsyncClient


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
    result = json_arg(result_json, "--result")
    me = cli_principal()
    run = with_client(
        ctx,
        lambda c: c.resolve(
            run_id, operation_id, executed=executed, result=result, principal=me, comment=comment
        ),
    )
    click.echo(
        f"run {run.id}: {operation_id} resolved as {'executed' if executed else 'not executed'} "
        f"by {me.name} on {me.where}; {run.state}"
    )


def _shown_and_confirmed(ctx: click.Context, run_id: str, approval_id: str, kind: str, approver: str) -> str:
    """``--yes-i-saw``: show the action (tool, arguments, their hash) and ask, on a terminal
    only, for confirmation; return the hash confirmed."""
    if not sys.stdin.isatty():
        raise click.UsageError(
            "--yes-i-saw asks for confirmation on a terminal, and stdin is not one: "
            f"pass --args-hash H instead (outlast status {run_id} shows it)"
        )
    req = with_client(ctx, lambda c: c.approval(run_id, approval_id))
    refuse_unauthenticated(req, cli_principal(), f"run '{run_id}', approval {approval_id}")
    click.echo(
        f"run {run_id}, approval {approval_id}: {req['status']} (approvers: {', '.join(req['approvers'])})"
    )
    click.echo(shown(f"  action     {req['action']}"))
    click.echo(shown(f"  arguments  {json.dumps(req['args'], ensure_ascii=False, sort_keys=True)}"))
    click.echo(f"  hash       {req['args_hash']}")
    if not click.confirm(f"{kind} this action as {approver}?", default=False):
        raise click.ClickException(f"run {run_id}: {approval_id} not decided (you did not confirm)")
    seen: str = req["args_hash"]
    return seen


PREFIX = 8  # the shortest start of an args hash the CLI takes for the whole hash
WHOLE = 64  # an args hash is a SHA-256, in hex


async def _whole_hash(c: AsyncClient, run_id: str, approval_id: str, given: str) -> str:
    """The args hash ``given``, or the whole hash it starts: taken when it is the start of this
    request's hash and of no other pending request's of the run; else refused, saying why."""
    if len(given) >= WHOLE:
        return given
    requests = [a for a in await c.approvals(run_id) if a["status"] == "pending"]
    starts = [a for a in requests if a["args_hash"].startswith(given.lower())]
    ours = [str(a["args_hash"]) for a in starts if a["op_id"] == approval_id]
    if ours and len(starts) == 1 and len(given) >= PREFIX:
        return ours[0]
    why = (
        f"matches {len(starts)} pending requests' hashes"
        if len(starts) > 1
        else f"is shorter than {PREFIX} characters"
        if ours
        else "is not the start of this request's hash"
    )
    raise click.ClickException(
        f"run {run_id}, approval {approval_id}: --args-hash {given} {why}; the full hash is needed "
        f"(outlast status {run_id} shows it)"
    )


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
        new_args = json_arg(kw.get("args_json"), "--args")
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

        async def go(c: AsyncClient) -> RunRecord:
            seen = args_hash and await _whole_hash(c, run_id, approval_id, args_hash)
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

        run = with_client(ctx, go)
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
