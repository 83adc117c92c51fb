"""These commands list a run's typed requests waiting for an answer, and answer one."""

from __future__ import annotations

import json

import click

from outlast._shapes import described
from outlast.cli.common import json_arg, shown, with_client
from outlast.cli.group import cli
from outlast.identity import cli_principal


@cli.command("requests")
@click.argument("run_id")
@click.option("--all", "every", is_flag=True, help="Answered and expired requests too.")
@click.option("--json", "as_json", is_flag=True, help="Each request as one line of JSON.")
@click.pass_context
def requests_(ctx: click.Context, run_id: str, every: bool, as_json: bool) -> None:
    """The run's requests waiting for an answer: id, name, payload and the response type."""
    rows = with_client(ctx, lambda c: c.requests(run_id, pending=not every))
    if not rows and not as_json:
        click.echo(f"run {run_id}: no request waits for an answer")
    for r in rows:
        if as_json:
            click.echo(json.dumps(r, default=str, ensure_ascii=False, sort_keys=True))
            continue
        expiry = f", expires {r['expires_at']:%Y-%m-%d %H:%M:%S %Z}" if r["expires_at"] else ""
        who = ", ".join(r["responders"]) or "any operator"
        status = "expired" if r["status"] == "pending" and r["expired"] else r["status"]
        click.echo(shown(f"{r['id']}  {r['name']}  {status} (responders: {who}{expiry})"))
        click.echo(shown(f"  payload   {json.dumps(r['payload'], ensure_ascii=False, sort_keys=True)}"))
        click.echo(shown(f"  response  {described(r['response_schema'])}"))
        if r["status"] == "answered":
            answer = json.dumps(r["answer"], ensure_ascii=False, sort_keys=True)
            click.echo(shown(f"  answer    {answer} by {r['answered_by']}"))


@cli.command()
@click.argument("run_id")
@click.argument("request_id")
@click.argument("answer_json", metavar="JSON")
@click.option("--by", help="Answer as this responder (checked against the request's responders).")
@click.pass_context
def respond(ctx: click.Context, run_id: str, request_id: str, answer_json: str, by: str | None) -> None:
    """Answer a request of the run with JSON, checked against its response type: the first valid
    answer stands; the same again is accepted, a different one refused."""
    value = json_arg(answer_json, "the answer")
    me = cli_principal()
    done = with_client(ctx, lambda c: c.respond(run_id, request_id, value, by=by, principal=me))
    if done.again:
        click.echo(
            f"run {run_id}: request {request_id} was already answered so by {done.by}; nothing changed"
        )
    else:
        click.echo(f"run {run_id}: request {request_id} answered by {done.by} ({me.name} on {me.where})")
