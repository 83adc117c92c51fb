"""An app with a typo in a tool's effect: refused at registration, so a worker never starts with it."""

from __future__ import annotations

from outlast import App

app = App()


@app.tool("fetch", effect="reed")  # type: ignore[arg-type]
def fetch(url: str) -> str:
    return url
