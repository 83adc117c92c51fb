"""The documentation's screenshots of the dashboard, made again: a seeded dashboard (a schema and
a key prefix of their own on the test servers, a real worker serving tests/apps/desk.py) driven by
Chromium, each page written as a PNG under docs/img/.

    OUTLAST_TEST_DATABASE_URL=postgresql://... OUTLAST_TEST_REDIS_URL=redis://... \\
        python -m tests.shots

Needs Playwright (``pip install playwright``) and a Chromium at /usr/bin/chromium."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx2 as httpx

from tests.browser import chromium, kept_world, person, run_url
from tests.conftest import ROOT, wait_for
from tests.dashboard import Desk, desk, served

IMG = ROOT / "docs" / "img"
MOST = 200_000  # bytes a screenshot may weigh
WIDTH = 1100


def seed(d: Desk) -> dict[str, str]:
    """Runs in every state a page shows, and two schedules; the ids the shots need."""
    c = d.client
    tour = c.enqueue("tour", {"text": "weekly report"}, run_id="report-2026-w49")
    ask = [c.enqueue("post", {"text": t}) for t in ("Release notes for v2.4", "Incident summary #118")]
    bill = c.enqueue("bill", {"amount": 120}, run_id="invoice-8841")
    refused = c.enqueue("post", {"text": "Draft: pricing change"})
    for i in range(3):
        c.enqueue("post", {"text": f"newsletter {i}"}, queue="newsletters")
    for run in (tour, refused, *ask):
        d.reach(run.id, "awaiting_approval")
    wait_for(lambda: c.status(bill.id).reason == "in_doubt", what="the charge to be in doubt")
    d.world.sql(
        "INSERT INTO schedules (name, workflow, queue, cron, tz, input, catch_up, paused) VALUES "
        "('nightly-digest', 'kid', 'newsletters', '0 3 * * *', 'Europe/Paris', %s, 'latest', false), "
        "('month-end-close', 'kid', 'newsletters', '0 6 1 * *', 'UTC', %s, 'none', true)",
        json.dumps({"text": "digest"}),
        json.dumps({"text": "close"}),
    )
    return {"tour": tour.id, "refused": refused.id}


def decide(d: Desk, site: str, run_id: str, decision: str, comment: str) -> None:
    """Decide the run's approval as alice, through the dashboard's API."""
    bearer = {"Authorization": f"Bearer {d.alice}"}
    [a] = [a for a in httpx.get(site + "/api/approvals", headers=bearer).json() if a["run_id"] == run_id]
    body = {"decision": decision, "comment": comment, "args_hash": a["args_hash"]}
    got = httpx.post(f"{site}/api/approvals/{quote(run_id, safe='')}/{a['op_id']}", json=body, headers=bearer)
    assert got.status_code == 200, got.text


def shoot(page: Any, name: str, clip: dict[str, float] | None = None) -> Path:
    """The page's first screen (or the part ``clip`` of the whole page) as docs/img/NAME.png."""
    path = IMG / f"{name}.png"
    page.screenshot(path=str(path), full_page=clip is not None, clip=clip)
    size = path.stat().st_size
    assert size < MOST, f"{path} weighs {size} bytes: show less of the page"
    print(f"{path.relative_to(ROOT)}: {size // 1024} KB")
    return path


def main() -> None:
    db = os.environ.get("OUTLAST_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
    rd = os.environ.get("OUTLAST_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
    IMG.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp, kept_world(db, rd, Path(tmp)) as w, desk(w) as d:
        ids = seed(d)
        with served(d.settings) as site, chromium() as browser:
            decide(d, site, ids["tour"], "approve", "Figures checked against the ledger")
            decide(d, site, ids["refused"], "reject", "Not before the board meets")
            d.reach(ids["tour"], "succeeded")
            d.reach(ids["refused"], "failed")
            alice = person(browser, site, d.alice, WIDTH, 760)
            olga = person(browser, site, d.olga, WIDTH, 520)
            alice.goto(site + "/")
            shoot(alice, "runs")
            alice.goto(run_url(site, ids["tour"]))
            alice.wait_for_load_state("networkidle")  # a final run's page is done changing
            box = alice.locator("#gantt").bounding_box()  # down to the drawing's legend
            shoot(alice, "run", clip={"x": 0, "y": 0, "width": WIDTH, "height": box["y"] + box["height"]})
            alice.goto(site + "/approvals")
            shoot(alice, "approvals")
            alice.goto(site + "/in-doubt")
            shoot(alice, "in-doubt")
            olga.goto(site + "/schedules")
            shoot(olga, "schedules")
            errors = alice.errors + olga.errors
    if errors:
        sys.exit(f"the pages said: {errors}")


if __name__ == "__main__":
    main()
