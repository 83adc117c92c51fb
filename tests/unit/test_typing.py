"""A workflow that calls a tool by reference is type-checked: mypy catches a wrong argument and
knows the result's type (the decorators keep the functions' types)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

WORKFLOW = """
from outlast import App, Run

app = App()


@app.tool("transfer")
def transfer(amount: int, to: str) -> dict[str, int]:
    return {"amount": amount}


@app.tool("search", effect="read")
async def search(query: str) -> list[str]:
    return [query]


@app.workflow("pay")
async def pay(run: Run, amount: int) -> int:
    receipt = await run.call(transfer, amount=amount, to="bob")
    found = await run.call(search, query="x")
    reveal_type(receipt)
    reveal_type(found)
    await run.call(transfer, amount="ten", to="bob")  # wrong: a str for an int
    await run.call("transfer", amount=1, to="bob")  # by name: not checked
    return receipt["amount"]
"""


def test_mypy_checks_calls_by_reference(tmp_path: Path) -> None:
    src = tmp_path / "wf.py"
    src.write_text(textwrap.dedent(WORKFLOW))
    p = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(src)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = p.stdout
    assert 'Revealed type is "dict[str, int]"' in out, out  # the sync tool's result
    assert 'Revealed type is "list[str]"' in out, out  # the async tool's result, awaited
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert len(errors) == 1, out  # the wrong argument, and nothing else
    assert "wf.py:23:" in errors[0] and '"str", "str"' in errors[0], out
