"""The world of tests/integration/test_artifacts.py: a workflow saves an artifact of its own
(``summary.txt``: text that differs at each making, so a save made again on a replay would show),
then calls ``render``, an idempotent tool that saves ``chart.png`` (the same bytes each dispatch)
and counts its dispatches in a file, then ``note`` (a plain tool) stops it for the test to kill."""

from __future__ import annotations

import uuid
from pathlib import Path

from outlast import App, Run, current_action

app = App()

CHART = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 40  # about 10 KB, the same every dispatch


@app.tool("render", idempotent=True)
def render(tally: str) -> dict[str, int]:
    with open(tally, "a") as f:
        f.write("dispatched\n")
    saved = current_action().save_artifact("chart.png", CHART).result(30)
    return {"size": saved["size"]}


@app.tool("note")
def note(text: str) -> int:
    return len(text)


@app.workflow("report")
async def report(run: Run, tally: str, keep: bool = False) -> dict[str, object]:
    summary = f"summary {uuid.uuid4()}\n".encode()  # another text at each making
    saved = await run.save_artifact("summary.txt", summary, keep=keep)
    chart = await run.call("render", tally=tally)
    path = Path(tally).with_suffix(".csv")
    path.write_text("a,b\n1,2\n")
    table = await run.save_artifact("table.csv", path)
    await run.call("note", text=saved["sha256"])
    return {"summary": saved["sha256"], "chart": chart["size"], "table": table["media_type"]}


@app.tool("snap", effect="read")
async def snap(text: str) -> str:
    saving = current_action().save_artifact("snap.txt", text.encode(), "text/plain")
    current_action().save_artifact("later.txt", b"not awaited: finished before the result")
    return (await saving)["sha256"]


@app.workflow("snapshot")
async def snapshot(run: Run, text: str) -> str:
    sha: str = await run.call("snap", text=text)
    return sha
