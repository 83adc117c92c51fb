"""Version 2 of tests/apps/family.py's ``parent``: it starts its child with another input. A run
admitted by version 1 is refused until migrated (``outlast resume RUN --accept-program-change``),
and then its replay must still match: the journaled start of ``gated({"gate": ...})`` is not the
start this code asks for."""

from __future__ import annotations

from typing import Any

from outlast import App, Run
from tests.apps import family

app = App()
for name in ("work", "gate"):
    tool = family.app.get_tool(name)
    app.tool(name, effect=tool.effect)(tool.fn)
app.workflow("gated")(family.gated)


@app.workflow("parent")
async def parent(run: Run, gate: str) -> dict[str, Any]:
    child = await run.start("gated", {"gate": gate.upper()})
    return {"child": child.id, "result": await child.result()}
