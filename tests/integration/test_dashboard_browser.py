"""The dashboard in a real browser (Playwright driving Debian's Chromium), against a real worker,
Postgres and Redis: a person signs in, sees a run waiting in the inbox, approves it with a comment
and watches it finish without reloading; an action altered after the page loaded is refused with
the reason shown; an in-doubt operation is resolved from the page and the run continues; a viewer
cannot decide. Each final page is kept as a screenshot in tests/artifacts/ (the docs' screenshots
are made by tests/shots.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from outlast._journal import args_hash
from tests.conftest import ROOT, World, wait_for
from tests.dashboard import Desk, desk, served

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = ROOT / "tests" / "artifacts"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="no /usr/bin/chromium: apt-get install chromium"),
]
sync_api = pytest.importorskip("playwright.sync_api")


@pytest.fixture
def d(world: World) -> Iterator[Desk]:
    with desk(world) as it:
        yield it


@pytest.fixture
def site(d: Desk) -> Iterator[str]:
    with served(d.settings) as base:
        yield base


@pytest.fixture
def browser() -> Iterator[sync_api.Browser]:
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM))
        yield b
        b.close()


def person(browser: sync_api.Browser, site: str, token: str) -> sync_api.Page:
    """A fresh browser context, signed in with ``token`` through the sign-in form."""
    page = browser.new_context(viewport={"width": 1200, "height": 900}).new_page()
    errors: list[str] = []  # script errors and refusals by the Content-Security-Policy
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("console", lambda m: errors.append(m.text) if "Refused" in m.text else None)
    page.goto(site + "/approvals")
    assert page.locator("#sign-in").is_visible()  # nothing shown before signing in
    page.fill("#token", token)
    page.click("#sign-in")
    page.wait_for_url(site + "/")
    page.errors = errors  # type: ignore[attr-defined]
    return page


def keep(page: sync_api.Page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def test_approve_in_the_page_and_watch_the_run_finish(d: Desk, site: str, browser: sync_api.Browser) -> None:
    run = d.client.enqueue("post", {"text": "Release notes for <b>v2</b> <script>alert(1)</script>"})
    d.reach(run.id, "awaiting_approval")
    page = person(browser, site, d.alice)
    page.goto(site + "/approvals")
    card = page.locator(f"#approval-{run.id}-op-1")
    assert "<script>alert(1)</script>" in card.locator(".args").inner_text()  # shown as text, not run
    assert args_hash({"text": run.input["text"]}) in card.inner_text()
    keep(page, "dashboard-approvals")

    card.locator("textarea[name=comment]").fill("Checked the text with the release manager")
    card.locator("button.approve").click()
    page.wait_for_url(f"{site}/runs/{run.id}")
    assert page.locator("#state").inner_text() != "succeeded"  # still going when the page loaded
    page.evaluate("window.stayed = true")
    page.locator("#state", has_text="succeeded").wait_for(timeout=20_000)
    assert page.evaluate("window.stayed === true")  # updated in place: the page never reloaded
    assert "Checked the text with the release manager" in page.locator(".comment").inner_text()
    assert "alice" in page.locator(".decider").inner_text()
    assert page.errors == []  # type: ignore[attr-defined]
    keep(page, "dashboard-run")


def test_the_runs_page_shows_new_runs_without_reloading(
    d: Desk, site: str, browser: sync_api.Browser
) -> None:
    page = person(browser, site, d.bob)
    assert page.locator("#runs").inner_text().count("no runs") == 1
    page.evaluate("window.stayed = true")
    run = d.client.enqueue("post", {"text": "hello"})
    page.locator(f"#runs tr:has-text('{run.id}')", has_text="awaiting_approval").wait_for(timeout=20_000)
    page.locator("#counts li.state-awaiting_approval", has_text="1").wait_for()
    assert page.evaluate("window.stayed === true")
    page.fill("#search", run.id)
    page.press("#search", "Enter")
    page.wait_for_url(f"{site}/runs/{run.id}")
    keep(page, "dashboard-runs-search")


def test_an_action_altered_after_the_page_loaded_is_refused(
    d: Desk, site: str, browser: sync_api.Browser
) -> None:
    run = d.client.enqueue("post", {"text": "pay the invoice of ACME"})
    d.reach(run.id, "awaiting_approval")
    page = person(browser, site, d.alice)
    page.goto(site + "/approvals")
    altered = {"text": "pay the invoice of MALLORY"}
    d.world.sql(
        "UPDATE approvals SET args = %s, args_hash = %s WHERE run_id = %s",
        json.dumps(altered),
        args_hash(altered),
        run.id,
    )
    card = page.locator(f"#approval-{run.id}-op-1")
    card.locator("textarea[name=comment]").fill("fine")
    card.locator("button.approve").click()
    error = page.locator("#error")
    error.wait_for()
    assert "other arguments" in error.inner_text() and "altered" in error.inner_text()
    assert d.client.status(run.id).state == "awaiting_approval"
    assert "MALLORY" in page.locator(f"#approval-{run.id}-op-1 .args").inner_text()  # shows the new one
    keep(page, "dashboard-altered-refused")


def test_an_in_doubt_operation_is_resolved_from_the_page(
    d: Desk, site: str, browser: sync_api.Browser
) -> None:
    run = d.client.enqueue("bill", {"amount": 40})
    wait_for(lambda: d.client.status(run.id).reason == "in_doubt", what="the charge to be in doubt")
    page = person(browser, site, d.alice)
    page.goto(site + "/in-doubt")
    card = page.locator(f"article.doubt:has-text('{run.id}')")
    assert "charge" in card.inner_text() and "timed out" in card.inner_text()
    card.locator("textarea[name=comment]").fill("The bank statement shows the charge")
    card.locator("textarea[name=result]").fill('{"charged": 40}')
    card.locator("button[value=yes]").click()
    page.wait_for_url(f"{site}/runs/{run.id}")
    page.locator("#state", has_text="succeeded").wait_for(timeout=20_000)
    assert json.loads(page.locator("#result").inner_text()) == {"charge": {"charged": 40}}
    [resolution] = d.journal(run.id, "resolution")
    assert resolution["who"]["principal"] == "alice" and resolution["who"]["how"] == "session"
    keep(page, "dashboard-in-doubt-resolved")


def test_a_person_outside_the_approvers_cannot_decide(d: Desk, site: str, browser: sync_api.Browser) -> None:
    run = d.client.enqueue("post", {"text": "hello"})
    d.reach(run.id, "awaiting_approval")
    page = person(browser, site, d.bob)
    page.goto(site + "/approvals")
    card = page.locator(f"#approval-{run.id}-op-1")
    assert "decide none: that takes the approver role" in card.inner_text()  # bob is a viewer
    assert card.locator("form").count() == 0
    csrf = page.locator("input[name=csrf]").first.get_attribute("value")
    forced = page.request.post(
        f"{site}/approvals/{run.id}/op-1",
        form={
            "csrf": csrf or "",
            "decision": "approve",
            "comment": "me too",
            "args_hash": run.input and args_hash({"text": "hello"}),
        },
    )
    assert forced.status == 403 and "bob may not decide approvals" in forced.text()
    assert d.client.status(run.id).state == "awaiting_approval"
    keep(page, "dashboard-outsider")


def test_the_runs_list_filters_and_pages(d: Desk, site: str, browser: sync_api.Browser) -> None:
    made = d.client.enqueue_many("post", [{"text": f"n{i}"} for i in range(60)], queue="nobody")
    page = person(browser, site, d.bob)
    page.locator("#live-mode[data-mode=pushed]").wait_for(timeout=10_000)  # changes are pushed
    page.fill("input[name=queue]", "nobody")
    page.select_option("select[name=sort]", "created")
    page.click("form.filters button[type=submit]")
    page.wait_for_url(f"{site}/?*queue=nobody*")
    first = page.locator("#runs tbody tr td:first-child").all_inner_texts()
    page.click("#next-page")
    page.locator("#first-page").wait_for()
    rest = page.locator("#runs tbody tr td:first-child").all_inner_texts()
    assert len(first) == 50 and len(rest) == 10 and page.locator("#next-page").count() == 0
    assert sorted(first + rest) == sorted(r.id for r in made)
    assert page.errors == []  # type: ignore[attr-defined]
    keep(page, "dashboard-runs-paged")
