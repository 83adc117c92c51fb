"""An app with a typo in a reconciler's tool name: a worker refuses to start with it."""

from __future__ import annotations

from typing import Any

from outlast import App, Run

app = App()


@app.tool("email_receipt")
def email_receipt(to: str) -> str:
    return f"sent to {to}"


@app.reconciler("emial_receipt")
def was_it_sent(args: dict[str, Any]) -> Any:
    raise RuntimeError("never asked")


@app.workflow("receipt")
async def receipt(run: Run, to: str) -> str:
    result: str = await run.call(email_receipt, to=to)
    return result
