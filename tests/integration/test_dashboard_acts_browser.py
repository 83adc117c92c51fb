"""Every act of the dashboard in a real browser (Playwright driving Debian's Chromium), as each
role, against a real worker, Postgres and Redis: a viewer (bob) and the role an act does not take
see no button for it, and their requests are refused (a form posted anyway: 403 with the reason on
the page; the API: 403 naming the role); the role it takes clicks it and the world changes, in the
principal's name. Then the timeline of a run with a retry, an approval and a child, and two
dashboard processes sharing one session across a restart. One browser, one worker and one
dashboard serve the whole module."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx2 as httpx
import pytest

from outlast._journal import args_hash
from tests.browser import CHROMIUM, chromium, kept_world, person, run_url
from tests.conftest import ROOT, wait_for
from tests.dashboard import Desk, desk, free_port, served

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="no /usr/bin/chromium: apt-get install chromium"),
]
expect = pytest.importorskip("playwright.sync_api").expect

ROLES = ("viewer", "operator", "approver")
PARKED = "parked"  # a queue nobody serves: its runs stay as a test puts them


@pytest.fixture(scope="module")
def d(services: tuple[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Desk]:
    with kept_world(*services, tmp_path_factory.mktemp("acts")) as w, desk(w) as it:
        yield it


@pytest.fixture(scope="module")
def site(d: Desk) -> Iterator[str]:
    with served(d.settings) as base:
        yield base


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as b:
        yield b


@pytest.fixture(scope="module")
def people(browser: Any, site: str, d: Desk) -> dict[str, Any]:
    """bob (a viewer), olga (an operator), alice (an approver), each signed in."""
    tokens = (d.bob, d.olga, d.alice)
    return {role: person(browser, site, token) for role, token in zip(ROLES, tokens, strict=True)}


def others(role: str) -> tuple[str, ...]:
    """The roles that may not do what ``role`` does (viewers act on nothing)."""
    return tuple(r for r in ROLES if r != role)


def csrf(page: Any) -> str:
    """The page's CSRF token (every page's sign-out form carries it)."""
    value = page.locator("input[name=csrf]").first.get_attribute("value")
    assert value, page.content()[:300]
    return str(value)


def forced(page: Any, site: str, path: str, **form: str) -> Any:
    """A form posted although the page showed no button for it, with the session's CSRF token."""
    return page.request.post(site + path, form={"csrf": csrf(page), **form}, max_redirects=0)


def api(page: Any, site: str, path: str, body: dict[str, Any] | None = None) -> Any:
    """A POST to the API with the page's session (and its CSRF token, as the API asks)."""
    token = page.request.get(site + "/api/me").json()["csrf"]
    return page.request.post(
        site + path,
        data=json.dumps(body or {}),
        headers={"Content-Type": "application/json", "X-CSRF-Token": token},
    )


def refused(page: Any, site: str, role: str, path: str, form: dict[str, str], body: dict[str, Any]) -> None:
    """The form posted anyway and the API call are both refused (403), naming the role it takes."""
    got = forced(page, site, path, **form)
    assert got.status == 403 and f"takes the {role} role" in got.text(), (path, got.status, got.text()[:300])
    said = api(page, site, "/api" + path, body)
    assert said.status == 403 and f"takes the {role} role" in said.json()["error"], (path, said.text())


def said(d: Desk, run_id: str, kind: str) -> list[dict[str, Any]]:
    return [e["detail"] for e in d.client.events(run_id) if e["kind"] == kind]


def parked(d: Desk, text: str, state: str = "", reason: str = "") -> str:
    """A run of ``post`` on a queue nobody serves, put in ``state`` (``reason``) when given."""
    run = d.client.enqueue("post", {"text": text}, queue=PARKED)
    if state:
        d.world.sql("UPDATE runs SET state = %s, reason = %s WHERE id = %s", state, reason or None, run.id)
    return run.id


def test_cancel(d: Desk, site: str, people: dict[str, Any]) -> None:
    run = d.client.enqueue("post", {"text": "cancel me"})
    d.reach(run.id, "awaiting_approval")
    for role in others("operator"):
        page = people[role]
        page.goto(run_url(site, run.id))
        assert page.locator("form.cancel").count() == 0, role
        refused(page, site, "operator", f"/runs/{run.id}/cancel", {}, {})
    assert d.client.status(run.id).state == "awaiting_approval"
    page = people["operator"]
    page.goto(run_url(site, run.id))
    page.click("form.cancel button")
    page.wait_for_url(run_url(site, run.id))
    page.locator("#state", has_text="cancelled").wait_for(timeout=20_000)
    assert [w["principal"] for w in said(d, run.id, "cancel_requested")] == ["olga"]


def test_resume(d: Desk, site: str, people: dict[str, Any]) -> None:
    run_id = parked(d, "resume me", "waiting", "timer")
    for role in others("operator"):
        page = people[role]
        page.goto(run_url(site, run_id))
        assert page.locator("form.resume").count() == 0, role
        refused(page, site, "operator", f"/runs/{run_id}/resume", {}, {})
    assert said(d, run_id, "resumed") == []
    page = people["operator"]
    page.goto(run_url(site, run_id))
    page.click("form.resume button")  # back to the same page: wait for the new state
    expect(page.locator("#state")).to_have_text(re.compile(r"^queued"))
    [resumed] = said(d, run_id, "resumed")
    assert resumed["principal"] == "olga" and resumed["accept_program_change"] is False


def test_resume_accepting_a_program_change_behind_its_confirmation(
    d: Desk, site: str, people: dict[str, Any]
) -> None:
    run_id = parked(d, "migrate me", "waiting", "program_changed")
    d.world.sql("UPDATE runs SET program = 'v1:aaa' WHERE id = %s", run_id)
    d.world.sql(
        "INSERT INTO events (run_id, kind, detail) VALUES (%s, 'waiting', %s)",
        run_id,
        json.dumps({"reason": "program_changed", "message": "admitted by v1:aaa; the workers serve v2:bbb"}),
    )
    for role in others("operator"):
        page = people[role]
        page.goto(run_url(site, run_id))
        assert page.locator("#accept").count() == 0 and page.locator("form.resume").count() == 0, role
        page.goto(run_url(site, run_id) + "/accept")  # the confirmation is anyone's to read
        page.click("#confirm button")  # and its form is refused
        assert "takes the operator role" in page.locator("#error").inner_text()
        refused(
            page,
            site,
            "operator",
            f"/runs/{run_id}/resume",
            {"accept_program_change": "yes"},
            {"accept_program_change": True},
        )
    assert said(d, run_id, "resumed") == []
    page = people["operator"]
    page.goto(run_url(site, run_id))
    page.click("#accept")
    page.wait_for_url(run_url(site, run_id) + "/accept")
    assert page.locator("#program").inner_text() == "v1:aaa"
    assert "the workers serve v2:bbb" in page.locator("#changed").inner_text()
    page.click("#confirm button")
    page.wait_for_url(run_url(site, run_id))
    [resumed] = said(d, run_id, "resumed")
    assert resumed["accept_program_change"] is True and resumed["principal"] == "olga"
    page.goto(run_url(site, run_id) + "/accept")
    assert "not waiting for a program change" in page.locator("#error").inner_text()


def test_retry_as_a_continuation(d: Desk, site: str, people: dict[str, Any]) -> None:
    run_id = parked(d, "retry me")
    d.client.cancel(run_id)
    d.reach(run_id, "cancelled")
    for role in others("operator"):
        page = people[role]
        page.goto(run_url(site, run_id))
        assert page.locator("form.retry").count() == 0, role
        refused(page, site, "operator", f"/runs/{run_id}/retry", {}, {})
    assert said(d, run_id, "continued") == []
    page = people["operator"]
    page.goto(run_url(site, run_id))
    page.click("form.retry button")
    page.wait_for_url(lambda url: url != run_url(site, run_id) and "/runs/" in url)
    again = page.locator("h1 code").inner_text()
    assert again != run_id
    new = d.client.status(again)
    assert new.parent_id == run_id and new.input == {"text": "retry me"} and new.state == "queued"
    [continued] = said(d, run_id, "continued")
    assert continued["as"] == again and continued["principal"] == "olga"


def test_requeue_a_dead_letter(d: Desk, site: str, people: dict[str, Any]) -> None:
    run = d.client.enqueue("post", {"text": "lettered"})
    d.reach(run.id, "awaiting_approval")
    r = d.world.redis()
    letter = r.xadd(f"{d.world.prefix}:{{default}}:dead", {"run": run.id, "_entry": "9-0", "_reason": "test"})
    r.close()
    form = {"queue": "default", "entry": letter}
    for role in others("operator"):
        page = people[role]
        page.goto(site + "/fleet")
        row = page.locator(f"form.letter:has-text('{letter}')")
        assert row.count() == 1 and row.locator("button").count() == 0, role
        got = forced(page, site, "/fleet/requeue", **form)
        assert got.status == 403 and "takes the operator role" in got.text()
        refusal = api(page, site, f"/api/dead-letters/default/{letter}/requeue")
        assert refusal.status == 403 and "takes the operator role" in refusal.json()["error"]
    assert "requeued" not in [e["kind"] for e in d.client.events(run.id)]
    page = people["operator"]
    page.goto(site + "/fleet")
    page.locator(f"form.letter:has-text('{letter}') button").click()
    assert f"run '{run.id}' (awaiting_approval) requeued" in page.locator("#message").inner_text()
    assert page.locator(f"form.letter:has-text('{letter}')").count() == 0
    assert "requeued" in [e["kind"] for e in d.client.events(run.id)]


def test_schedules_pause_resume_and_trigger(d: Desk, site: str, people: dict[str, Any]) -> None:
    d.world.sql(
        "INSERT INTO schedules (name, workflow, queue, cron, tz, input, catch_up) "
        "VALUES ('nightly', 'kid', %s, '0 3 * * *', 'UTC', '{\"text\": \"tick\"}', 'latest')",
        PARKED,
    )
    row = "#schedule-nightly"
    for role in others("operator"):
        page = people[role]
        page.goto(site + "/schedules")
        assert page.locator(row).count() == 1 and page.locator(f"{row} form").count() == 0, role
        for act in ("pause", "resume", "trigger"):
            refused(page, site, "operator", f"/schedules/nightly/{act}", {}, {})
    assert not d.client.schedules()[0]["paused"]
    page = people["operator"]
    page.goto(site + "/schedules")
    page.click(f"{row} form.pause button")
    expect(page.locator("#message")).to_have_text("schedule 'nightly' paused")
    assert page.locator(f"{row} b", has_text="paused").count() == 1 and d.client.schedules()[0]["paused"]
    page.click(f"{row} form.resume button")
    expect(page.locator("#message")).to_have_text("schedule 'nightly' resumed")
    assert not d.client.schedules()[0]["paused"] and page.locator(f"{row} form.pause").count() == 1
    page.click(f"{row} form.trigger button")
    expect(page.locator("#message")).to_contain_text("triggered")
    message = page.locator("#message").inner_text()
    assert message.startswith("schedule 'nightly' triggered: run ")
    triggered = message.rsplit(" ", 1)[-1]
    assert d.client.status(triggered).input == {"text": "tick"}
    assert [t["principal"] for t in said(d, triggered, "triggered")] == ["olga"]


def test_approve_and_reject(d: Desk, site: str, people: dict[str, Any]) -> None:
    yes = d.client.enqueue("post", {"text": "approve me"})
    no = d.client.enqueue("post", {"text": "reject me"})
    for run in (yes, no):
        d.reach(run.id, "awaiting_approval")
    for role in others("approver"):
        page = people[role]
        page.goto(site + "/approvals")
        card = page.locator(f"#approval-{no.id}-op-1")
        assert "decide none: that takes the approver role" in card.inner_text(), role
        assert card.locator("form").count() == 0
        decision = {"decision": "reject", "comment": "no", "args_hash": args_hash(no.input)}
        refused(page, site, "approver", f"/approvals/{no.id}/op-1", decision, decision)
    assert d.client.status(no.id).state == "awaiting_approval"
    page = people["approver"]
    for run, button, comment in ((yes, "approve", "fine by me"), (no, "reject", "not this one")):
        page.goto(site + "/approvals")
        card = page.locator(f"#approval-{run.id}-op-1")
        card.locator("textarea[name=comment]").fill(comment)
        card.locator(f"button.{button}").click()
        page.wait_for_url(run_url(site, run.id))
        page.locator("#state", has_text="succeeded" if button == "approve" else "failed").wait_for(
            timeout=20_000
        )
        assert "alice" in page.locator(".decider").inner_text()
        assert page.locator(".comment").inner_text() == comment
    assert "ApprovalRejected" in page.locator("#run-error").inner_text()
    assert page.errors == []


def test_in_doubt_resolution(d: Desk, site: str, people: dict[str, Any]) -> None:
    run = d.client.enqueue("bill", {"amount": 7})
    wait_for(lambda: d.client.status(run.id).reason == "in_doubt", what="the charge to be in doubt")
    card = f"#doubt-{run.id}-op-1"
    body = {"executed": False, "comment": "the bank shows nothing"}
    for role in others("approver"):
        page = people[role]
        page.goto(site + "/in-doubt")
        assert "Resolving takes the approver role" in page.locator(card).inner_text(), role
        assert page.locator(f"{card} form").count() == 0
        refused(
            page, site, "approver", f"/runs/{run.id}/resolve/op-1", {"executed": "no", "comment": "x"}, body
        )
    assert d.journal(run.id, "resolution") == []
    page = people["approver"]
    page.goto(site + "/in-doubt")
    page.locator(f"{card} textarea[name=comment]").fill("the bank shows nothing")
    page.locator(f"{card} button[value=no]").click()
    page.wait_for_url(run_url(site, run.id))
    [resolution] = d.journal(run.id, "resolution")
    assert resolution["executed"] is False and resolution["who"]["principal"] == "alice"

    # Not executed: the charge is dispatched again (and, as slow as before, is in doubt again).
    def again() -> bool:
        kinds = [e.kind for e in d.client.journal(run.id)]
        after = kinds[kinds.index("resolution") + 1 :]
        return "redispatch" in after or "intention" in after

    wait_for(again, what="the charge dispatched again")
    page.reload()  # its timeline marks the re-dispatch, across the lanes and on the charge's bar
    expect(page.locator("#gantt g.marker.redispatch title")).to_contain_text("op-1 re-dispatched")
    assert page.locator("#gantt g.bar[data-op='op-1'] line.redispatch").count() == 1


def test_batch_actions_confirm_their_count(d: Desk, site: str, people: dict[str, Any]) -> None:
    batchq = "batchq"
    made = [d.client.enqueue("post", {"text": f"b{i}"}, queue=batchq).id for i in range(3)]
    for role in others("operator"):
        page = people[role]
        page.goto(f"{site}/?queue={batchq}")
        assert page.locator("form.batch-acts").count() == 0, role
        page.goto(f"{site}/batch/cancel?queue={batchq}")
        assert page.locator("#count").inner_text() == "3 runs of this list are to cancel."
        assert page.locator("#confirm button").count() == 0
        got = forced(page, site, f"/batch/cancel?queue={batchq}", count="3")
        assert got.status == 403 and "takes the operator role" in got.text()
        said_api = api(page, site, f"/api/batch/cancel?queue={batchq}", {"count": 3})
        assert said_api.status == 403 and "takes the operator role" in said_api.json()["error"]
    assert {d.client.status(r).state for r in made} == {"queued"}

    page = people["operator"]
    page.goto(f"{site}/?queue={batchq}")
    page.click("#batch-cancel")
    page.wait_for_url(f"{site}/batch/cancel?queue={batchq}")
    assert page.locator("#count").inner_text() == "3 runs of this list are to cancel."
    made.append(d.client.enqueue("post", {"text": "late"}, queue=batchq).id)  # after the count was shown
    page.click("#confirm button")
    assert "4 runs match now, not the 3 confirmed" in page.locator("#error").inner_text()
    assert {d.client.status(r).state for r in made} == {"queued"}
    page.goto(f"{site}/?queue={batchq}")
    page.click("#batch-cancel")
    assert page.locator("#count").inner_text() == "4 runs of this list are to cancel."
    page.click("#confirm button")
    assert page.locator("#message").inner_text() == "cancel: 4 runs done"
    assert {d.client.status(r).state for r in made} == {"cancelled"}
    page.goto(f"{site}/?queue={batchq}")
    page.click("#batch-retry")
    assert "4 runs of this list are to retry (each as a continuation)" in page.locator("#count").inner_text()
    page.click("#confirm button")
    assert page.locator("#message").inner_text() == "retry: 4 runs done"
    continued = [said(d, r, "continued") for r in made]
    assert all(len(c) == 1 and c[0]["principal"] == "olga" for c in continued), continued
    assert sorted(d.client.status(c[0]["as"]).parent_id for c in continued) == sorted(made)


def test_the_timeline_of_a_run_with_a_retry_an_approval_and_a_child(
    d: Desk, site: str, people: dict[str, Any]
) -> None:
    run = d.client.enqueue("tour", {"text": f"tour-{time.time_ns()}"})
    d.reach(run.id, "awaiting_approval")
    page = people["approver"]
    page.goto(site + "/approvals")
    card = page.locator(f"article.approval:has-text('{run.id}')")
    card.locator("textarea[name=comment]").fill("go on")
    card.locator("button.approve").click()
    page.wait_for_url(run_url(site, run.id))
    page.locator("#state", has_text="succeeded").wait_for(timeout=20_000)
    page.reload()  # the drawing as the finished run has it
    page.wait_for_load_state("networkidle")  # its stream said "final": the page is done changing
    drawn = page.evaluate(DRAWN)
    assert [(b["kind"], b["op"]) for b in drawn["bars"]] == [
        ("bar operation failed", "op-1"),
        ("bar retry", "op-2"),
        ("bar approval", "op-3"),
        ("bar wait", "op-4"),
    ], drawn
    frame = drawn["frame"]
    for b in drawn["bars"]:  # each bar drawn where a person sees it: a box of its own, in the figure
        assert b["width"] >= 1 and b["height"] >= 10, b
        assert frame["x"] <= b["x"] and b["x"] + b["width"] <= frame["x"] + frame["width"] + 1, b
    titles = [b["title"] for b in drawn["bars"]]
    assert "fencing token 1" in titles[0] and "retry of op-1" in titles[1]
    assert "approved by alice" in titles[2] and "succeeded" in titles[3]
    assert drawn["bars"][0]["token"] == "#1"  # the fencing token of the worker that dispatched it
    assert drawn["markers"] == []  # one worker all along: no handover
    assert page.locator("#gantt figcaption.legend").is_visible()
    child = page.locator("#children a").first
    assert child.inner_text() == f"{run.id}:op-4"
    child.click()
    page.wait_for_url(run_url(site, f"{run.id}:op-4"))
    assert page.locator("#state").inner_text() == "succeeded"
    assert page.errors == []


# The drawing as the browser laid it out, read at once (the live page may swap its parts).
DRAWN = """() => {
  const svg = document.querySelector("#gantt svg"), f = svg.getBoundingClientRect();
  const bars = [...svg.querySelectorAll("g.bar")].map((g) => {
    const r = g.querySelector("rect").getBoundingClientRect(), t = g.querySelector("text.token");
    return {kind: g.getAttribute("class"), op: g.dataset.op, x: r.x, width: r.width, height: r.height,
            title: g.querySelector("title").textContent, token: t ? t.textContent : null};
  });
  const markers = [...svg.querySelectorAll("g.marker")].map((m) => m.getAttribute("class"));
  return {frame: {x: f.x, width: f.width}, bars, markers};
}"""


def dashboard(d: Desk, port: int) -> subprocess.Popen[bytes]:
    """A dashboard process of its own (``outlast dashboard``) on ``port``, once it answers."""
    with open(d.world.tmp / f"dashboard-{port}.log", "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "outlast", "dashboard", "--port", str(port)],
            env=d.world.env(OUTLAST_USERS=d.settings.users or ""),
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
    d.world.procs.append(proc)

    def answers() -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/login", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    wait_for(answers, 30, what=f"the dashboard on port {port} to answer")
    return proc


def test_two_dashboard_processes_share_one_session_across_a_restart(d: Desk, browser: Any) -> None:
    run = d.client.enqueue("post", {"text": "decided on the other process"})
    ports = free_port(), free_port()
    one, two = (f"http://127.0.0.1:{p}" for p in ports)
    first = dashboard(d, ports[0])
    dashboard(d, ports[1])
    d.reach(run.id, "awaiting_approval")

    on_one = person(browser, one, d.alice)
    [cookie] = [c for c in on_one.context.cookies() if c["name"] == "outlast_session"]
    elsewhere = browser.new_context(viewport={"width": 1200, "height": 900})
    elsewhere.add_cookies([{"name": cookie["name"], "value": cookie["value"], "url": two}])
    on_two = elsewhere.new_page()
    on_two.goto(two + "/approvals")  # signed in there with the cookie made by the other process
    assert on_two.locator("#whoami").inner_text().startswith("alice")
    card = on_two.locator(f"#approval-{run.id}-op-1")
    card.locator("textarea[name=comment]").fill("on the second process")
    card.locator("button.approve").click()  # its form's CSRF token holds on either process
    on_two.wait_for_url(run_url(two, run.id))
    # the decision is committed before the redirect; its journal entry, when a worker resumes the run
    wait_for(lambda: d.journal(run.id, "decision"), what="the decision journaled by the resumed run")
    [decision] = d.journal(run.id, "decision")
    assert "alice" in str(decision) and "on the second process" in str(decision)

    first.terminate()
    first.wait(15)
    dashboard(d, ports[0])  # the first process again, on its port: sessions live in Postgres
    on_one.goto(run_url(one, run.id))
    assert on_one.locator("#whoami").inner_text().startswith("alice")
    on_one.locator("#state", has_text="succeeded").wait_for(timeout=20_000)
    on_two.goto(two + "/")
    on_two.click("form.who button")  # signing out on one process ends the session on both
    on_two.wait_for_url(two + "/login")
    on_one.goto(one + "/approvals")
    assert on_one.locator("#sign-in").is_visible() and on_one.locator("#whoami").count() == 0
    elsewhere.close()
    on_one.context.close()
