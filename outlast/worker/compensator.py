"""The compensator acts when a run that asked for it is cancelled or fails. The compensations of its
completed operations run, newest first, each as a journaled operation of its own (``undo-op-N``)
that resumes like any other."""

from __future__ import annotations

from typing import Any

from outlast._journal import args_hash
from outlast.app import App
from outlast.errors import InDoubt, ToolError
from outlast.worker.dispatcher import Dispatcher
from outlast.worker.replayer import Replayer, asked_by_result


async def compensate(app: App, replayer: Replayer, dispatcher: Dispatcher) -> dict[str, list[Any]]:
    """Undo what can be undone. Says an effect was undone only if its compensation succeeded."""
    done = []
    for op_id, kinds in replayer.journal.ops.items():
        result, intention = kinds.get("result"), kinds.get("intention") or asked_by_result(kinds)
        if result is None or intention is None or "error" in result.fields or op_id.startswith("undo-"):
            continue
        if intention.data["tool"] in app.compensations:
            done.append((result.seq, op_id, intention.data, result.data["ok"]))
    compensated: list[Any] = []
    not_compensated: list[Any] = []
    for _seq, op_id, asked, value in sorted(done, reverse=True):
        tool = app.compensations[asked["tool"]]
        undo_op = f"undo-{op_id}"
        replayer.serve(undo_op)
        args = tool.validate({"args": asked["args"], "result": value})
        try:
            op = dispatcher.op(undo_op, tool, args, args_hash(args))  # its hash: of its arguments as given
            if replayer.journaled(undo_op):
                await dispatcher.replay(op)
            else:
                await dispatcher.dispatch_new(op, {})
            compensated.append({"operation": op_id, "tool": asked["tool"]})
        except (ToolError, InDoubt) as exc:
            not_compensated.append({"operation": op_id, "tool": asked["tool"], "why": str(exc)})
    return {"compensated": compensated, "not_compensated": not_compensated}
