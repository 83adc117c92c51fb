"""What a run shows, over HTTP, to a viewer: its state as JSON, its events as server-sent events
(each with its id; a reconnection with ``Last-Event-ID`` goes on after it) and its live output as
server-sent events then its result; the CLI's ``outlast state`` and ``outlast events --after``."""

from __future__ import annotations

import html
import json

from starlette.testclient import TestClient

from outlast import Client
from outlast.dashboard import create_app
from tests.conftest import World, wait_for
from tests.dashboard import served
from tests.integration.test_dashboard_live import events, people

APP = "tests.apps.shows:app"


def test_a_viewer_reads_state_and_follows_events_from_the_last_id(world: World) -> None:
    settings, headers = people(world)  # bob, a viewer
    with Client(settings=settings) as client:
        rid = client.enqueue("progress", {"steps": 3}).id
        world.worker(APP)
        wait_for(lambda: client.status(rid).final, 60, 0.1, "the run to end")
        every = client.events(rid)
    with TestClient(create_app(settings), base_url="http://127.0.0.1") as tc:
        got = tc.get(f"/api/runs/{rid}/state", headers=headers)
        assert got.status_code == 200, got.text
        assert got.json()["state"]["step"]["value"] == 2 and got.json()["state"]["step"]["version"] == 3
        assert tc.get("/api/runs/nope/state", headers=headers).status_code == 404
        assert tc.get(f"/api/runs/{rid}/state").status_code in (401, 303, 302)  # signed in only
    with served(settings) as base:
        url = f"{base}/api/runs/{rid}/events"
        first = [(n, json.loads(d)) for n, d in events(url, headers, 10)]
        assert [d["id"] for n, d in first if n == "event"] == [e["id"] for e in every]
        assert first[-1][0] == "end"
        middle = every[len(every) // 2]["id"]
        again = [
            json.loads(d)
            for n, d in events(url, {**headers, "Last-Event-ID": str(middle)}, 10)
            if n == "event"
        ]
        assert [d["id"] for d in again] == [e["id"] for e in every if e["id"] > middle]
        assert "custom:step" in [d["kind"] for n, d in first if n == "event"]


def test_live_output_over_http_then_the_result(world: World) -> None:
    settings, headers = people(world)
    with Client(settings=settings) as client:
        rid = client.enqueue("talk", {"n": 2}).id
        world.worker(APP)
        wait_for(lambda: client.status(rid).final, 60, 0.1, "the run to end")
    with served(settings) as base:
        got = [(n, json.loads(d)) for n, d in events(f"{base}/api/runs/{rid}/stream", headers, 10)]
    assert [d["data"] for n, d in got if n == "chunk"][:2] == ["w0", "w1"]
    assert got[-1][0] == "result" and got[-1][1]["state"] == "succeeded"


def test_the_cli_shows_state_and_events_after_an_id(world: World) -> None:
    with Client(settings=world.settings()) as client:
        rid = client.enqueue("progress", {"steps": 2}).id
        world.worker(APP)
        wait_for(lambda: client.status(rid).final, 60, 0.1, "the run to end")
        every = client.events(rid)
    shown = world.cli("state", rid)
    assert shown.returncode == 0, shown.stderr
    assert "step  v2  1" in shown.stdout and "done  v1  true" in shown.stdout
    one = world.cli("state", rid, "step", "--json")
    assert json.loads(one.stdout) == {"step": {"value": 1, "version": 2}}
    missing = world.cli("state", rid, "nope")
    assert missing.returncode == 1 and "shows no state 'nope'" in missing.stderr
    waited = world.cli("state", rid, "step", "--wait", "2", "--timeout", "1")
    assert waited.returncode == 1 and "has no version after 2" in waited.stderr
    after = world.cli("events", rid, "--after", str(every[-3]["id"]))
    assert after.returncode == 0 and len(after.stdout.splitlines()) == 2, after.stdout


def test_the_cli_prints_no_control_character_a_run_was_made_to_show(world: World) -> None:
    """``outlast stream``, ``state``, ``requests`` and ``status``, as processes: the escapes and
    control characters in a run's chunks, state keys and values, request name and payload and
    result are printed escaped (``\\x1b``), never raw; a stream's own newlines stay newlines."""
    with Client(settings=world.settings()) as client:
        rid = client.enqueue("hostile", {}).id
        world.worker(APP)
        wait_for(lambda: client.status(rid).state == "waiting", 60, 0.1, "the run to ask")
        asked = world.cli("requests", rid)
        [req] = client.requests(rid)
        client.respond(rid, req["id"], "yes", by="ops")
        wait_for(lambda: client.status(rid).final, 60, 0.1, "the run to end")
    printed = {
        "requests": asked,
        "requests --all": world.cli("requests", rid, "--all"),
        "state": world.cli("state", rid),
        "stream": world.cli("stream", rid),
        "status": world.cli("status", rid),
    }
    for what, done in printed.items():
        assert done.returncode == 0, (what, done.stderr)
        raw = sorted({c for c in done.stdout if not c.isprintable() and c != "\n"})
        assert raw == [], (what, raw, done.stdout)
    assert "\\x1b]52;c;aGk=\\x07\\x1b]0;pwned" in printed["requests"].stdout  # the request's name
    assert "key\\x1b]52;c;aGk=\\x07" in printed["state"].stdout  # a state key
    assert "\\r\\x9b31m\\u202e\nnext line\n" in printed["stream"].stdout  # a chunk: its newlines kept


def test_the_run_page_shows_state_and_the_events_the_run_emitted(world: World) -> None:
    settings, headers = people(world)
    with Client(settings=settings) as client:
        rid = client.enqueue("progress", {"steps": 2}).id
        world.worker(APP)
        wait_for(lambda: client.status(rid).final, 60, 0.1, "the run to end")
    with TestClient(create_app(settings), base_url="http://127.0.0.1") as tc:
        page = html.unescape(tc.get(f"/runs/{rid}", headers=headers).text)
        shown = tc.get(f"/api/runs/{rid}", headers=headers).json()
    state = page[page.index('id="shown-state"') : page.index("</table>", page.index('id="shown-state"'))]
    assert "<td>step</td><td>2</td>" in state and "<td>done</td><td>1</td>" in state
    emitted = page[page.index('id="custom-events"') :]
    assert emitted.count("custom:step") >= 2 and '"i": 1' in emitted
    assert shown["shown_state"]["step"] == {"value": 1, "version": 2}
    assert [e["detail"]["data"] for e in shown["custom_events"]] == [{"i": 0}, {"i": 1}]


def test_the_run_page_is_told_when_the_state_changes_with_no_event(world: World) -> None:
    settings, headers = people(world)
    with Client(settings=settings) as client:
        rid = client.enqueue("progress", {"steps": 3, "pause": 0.4, "emit": False}).id
        with served(settings) as base:
            world.worker(APP)
            got = [name for name, _ in events(f"{base}/live?run={rid}", headers, 30)]
    # a change per state set (4) besides the run's own events (started, succeeded), then final
    assert got[-1] == "final" and got.count("change") >= 4, got
