"""Acts are what people do from the pages and the API alike, as the authenticated principal: decide an
approval, answer a request, resolve an in-doubt operation, pause, resume or trigger a schedule. The
caller's role is checked before these are called (``web.check_role``, or the page's own refusal)."""

from __future__ import annotations

import json
from typing import Any

from outlast._model import Answered
from outlast._secrets import shown_sealed
from outlast.dashboard.web import Refusal
from outlast.identity import Principal
from outlast.producer import AsyncClient

DECISIONS = ("approve", "reject", "revise")


async def decide(
    client: AsyncClient,
    principal: Principal,
    run_id: str,
    approval_id: str,
    form: dict[str, Any],
) -> None:
    """Approve, reject or revise as ``principal``, for the action whose hash the person saw."""
    decision, comment, args_hash = form.get("decision"), form.get("comment"), form.get("args_hash")
    if decision not in DECISIONS:
        raise Refusal(400, f"decision must be one of {', '.join(DECISIONS)}")
    if not isinstance(args_hash, str) or not args_hash:
        raise Refusal(400, "args_hash is required: the hash of the arguments you saw")
    if not isinstance(comment, str) or not comment.strip():
        raise Refusal(400, "a comment is required: say why")
    kw: dict[str, Any] = {"principal": principal, "comment": comment, "args_hash": args_hash}
    if decision == "approve":
        await client.approve(run_id, approval_id, **kw)
    elif decision == "reject":
        await client.reject(run_id, approval_id, **kw)
    else:
        args = form.get("args")
        if isinstance(args, str):
            args = _json(args, "the revised arguments")
        if not isinstance(args, dict):
            raise Refusal(400, "the revised arguments must be a JSON object")
        if client.app is not None:
            asked = await client.approval(run_id, approval_id)
            tool = client.app.tools.get(asked["action"])
            if tool is not None:  # InvalidInput naming what is wrong; the worker checks again at the call
                tool.check(args, unchecked=shown_sealed(asked["args"], args))
        await client.revise(run_id, approval_id, args=args, **kw)


async def respond(
    client: AsyncClient, principal: Principal, run_id: str, request_id: str, form: dict[str, Any]
) -> Answered:
    """Answer a request of the run as ``principal``: the API's ``answer`` (any JSON value), or the
    page's ``answer_json`` (its text)."""
    if "answer" in form:
        value = form["answer"]
    else:
        text = form.get("answer_json")
        if not isinstance(text, str) or not text.strip():
            raise Refusal(400, "the answer is required: a JSON value of the response type")
        value = _json(text, "the answer")
    return await client.respond(run_id, request_id, value, principal=principal)


async def resolve(
    client: AsyncClient, principal: Principal, run_id: str, op_id: str, form: dict[str, Any]
) -> None:
    """Resolve an in-doubt operation as ``principal``: executed (with an optional result) or not."""
    executed, comment = form.get("executed"), form.get("comment")
    if isinstance(executed, str):
        executed = {"yes": True, "true": True, "no": False, "false": False}.get(executed)
    if not isinstance(executed, bool):
        raise Refusal(400, "executed must be true or false")
    if not isinstance(comment, str) or not comment.strip():
        raise Refusal(400, "a comment is required: say why")
    result = form.get("result")
    if isinstance(result, str):
        result = _json(result, "the result") if result.strip() else None
    await client.resolve(
        run_id, op_id, executed=executed, result=result, principal=principal, comment=comment
    )


def _json(text: str, what: str) -> Any:
    """``text`` (a form's field, or the API's text of a JSON value) read as JSON; a 400 saying
    what is wrong with ``what``, never a server error."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise Refusal(400, f"{what} is not JSON: {exc}") from None
    except ValueError:  # an integer of thousands of digits (Python's int limit)
        raise Refusal(400, f"{what} holds a number of too many digits: send it as a string") from None
    except RecursionError:
        raise Refusal(400, f"{what} is nested too deep") from None


async def schedule_act(c: AsyncClient, who: Principal, name: str, act: str) -> str:
    """Pause, resume or trigger the schedule ``name`` as ``who``; what was done, in words."""
    if act == "trigger":
        run = await c.trigger_schedule(name, principal=who)
        return f"schedule '{name}' triggered: run {run.id}"
    if act not in ("pause", "resume"):
        raise Refusal(404, f"no schedule action '{act[:40]}' (pause, resume, trigger)")
    await c.pause_schedule(name, act == "pause", principal=who)
    return f"schedule '{name}' {act}d"
