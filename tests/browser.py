"""What the browser tests (Playwright driving Debian's Chromium) and the docs' screenshots share:
a world kept for a whole module (its schema, prefix and worker made once), Chromium, and a person
signed in through the sign-in form in a browser context of their own."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

from tests.conftest import World, drop_keys, drop_schemas, migrate_schema

CHROMIUM = Path("/usr/bin/chromium")  # Playwright cannot download its own browser here


@contextmanager
def kept_world(database_url: str, redis_url: str, tmp: Path) -> Iterator[World]:
    """A world like the ``world`` fixture's, for as long as the block lasts (a module's tests)."""
    tag = uuid.uuid4().hex[:10]
    w = World(database_url, redis_url, f"t_{tag}", f"t{tag}", tmp)
    migrate_schema(database_url, w.schema)
    try:
        yield w
    finally:
        w.stop_all()
        drop_schemas(database_url, w.schema)
        drop_keys(w)


@contextmanager
def chromium() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM))
        try:
            yield b
        finally:
            b.close()


def person(browser: Any, site: str, token: str, width: int = 1200, height: int = 900) -> Any:
    """A fresh browser context, signed in with ``token`` through the sign-in form; its page
    collects script errors and refusals by the Content-Security-Policy in ``page.errors``."""
    page = browser.new_context(viewport={"width": width, "height": height}).new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if "Refused" in m.text else None)
    page.goto(site + "/login")
    page.fill("#token", token)
    page.click("#sign-in")
    page.wait_for_url(site + "/")
    page.errors = errors
    return page


def run_url(site: str, run_id: str) -> str:
    return f"{site}/runs/{quote(run_id, safe='')}"
