"""The runs list through the API and the page: every filter, the sorts, id-prefix and input
search, opaque cursors that page without repeating or skipping a run enqueued meanwhile, and a
400 naming the bad parameter."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from outlast import Client
from outlast.dashboard import create_app, lists
from outlast.identity import add_user
from outlast.producer import admin
from tests.conftest import World

HEADERS: dict[str, str] = {}


@pytest.fixture
def http(world: World) -> Iterator[tuple[TestClient, Client]]:
    users = world.tmp / "users.toml"
    token = add_user(users, "bob", ["viewers"])
    HEADERS["Authorization"] = f"Bearer {token}"
    settings = world.settings(users=str(users))
    with Client(settings=settings) as c, TestClient(create_app(settings), base_url="http://127.0.0.1") as tc:
        yield tc, c


def ids(http: TestClient, **params: Any) -> tuple[list[str], str | None]:
    got = http.get("/api/runs", params=params, headers=HEADERS)
    assert got.status_code == 200, got.text
    return [r["id"] for r in got.json()["runs"]], got.json()["next"]


def seed(world: World, c: Client) -> None:
    """Runs a-0..a-6 (tenant t1, high), b-0..b-4 (input customer c-1), x-0 and x-1 (children of
    a-0, one in doubt), enqueued in that order; nobody serves them, so they stay as made here."""
    for i in range(7):
        c.enqueue("wa", {"n": i}, run_id=f"a-{i}", tenant="t1", priority="high")
    for i in range(5):
        c.enqueue("wb", {"customer": "c-1", "n": i}, run_id=f"b-{i}", queue="other")
    for i in range(2):
        c.enqueue("wx", {"n": i}, run_id=f"x-{i}")
    world.sql("UPDATE runs SET started_by = 'a-0' WHERE id LIKE 'x-%%'")
    world.sql("UPDATE runs SET state = 'waiting', reason = 'in_doubt' WHERE id = 'x-1'")
    world.sql(  # b-3 finished last, though started first
        "UPDATE runs SET started_at = created_at, finished_at = created_at + "
        "CASE id WHEN 'b-3' THEN interval '1 hour' ELSE interval '1 minute' END WHERE id LIKE 'b-%%'"
    )


def test_every_filter_and_sort(world: World, http: tuple[TestClient, Client]) -> None:
    tc, c = http
    seed(world, c)
    assert ids(tc, workflow="wa")[0] == [f"a-{i}" for i in reversed(range(7))]
    assert ids(tc, tenant="t1", priority="high")[0] == ids(tc, workflow="wa")[0]
    assert ids(tc, queue="other")[0] == [f"b-{i}" for i in reversed(range(5))]
    assert ids(tc, input='{"customer": "c-1"}')[0] == ids(tc, queue="other")[0]
    assert ids(tc, parent="a-0")[0] == ["x-1", "x-0"]
    assert ids(tc, in_doubt="1")[0] == ["x-1"]
    assert ids(tc, state="waiting")[0] == ["x-1"]
    assert ids(tc, prefix="b-")[0] == [f"b-{i}" for i in range(5)]  # an id prefix lists by id
    assert ids(tc, sort="finished")[0][0] == "b-3"
    assert set(ids(tc, sort="started")[0]) == {f"b-{i}" for i in range(5)}  # only runs started
    at = world.sql("SELECT created_at FROM runs WHERE id = 'b-0'")[0][0]
    assert ids(tc, since=at.isoformat(), workflow="wb")[0] == [f"b-{i}" for i in reversed(range(5))]
    assert ids(tc, until=at.isoformat())[0] == [f"a-{i}" for i in reversed(range(7))]
    runs = tc.get("/api/runs", params={"sort": "finished"}, headers=HEADERS).json()["runs"]
    assert runs[0]["duration"] == 3600.0


def test_cursors_page_without_repeats_or_skips_while_runs_arrive(
    world: World, http: tuple[TestClient, Client]
) -> None:
    tc, c = http
    seed(world, c)
    seen: list[str] = []
    cursor = None
    n = 0
    while True:
        page, cursor = ids(tc, limit=3, **({"cursor": cursor} if cursor else {}))
        assert len(page) <= 3
        seen += page
        c.enqueue("wa", {}, run_id=f"new-{n}")  # arrives between two pages: before the first
        n += 1
        if cursor is None:
            break
    every = [r[0] for r in world.sql("SELECT id FROM runs WHERE id NOT LIKE 'new-%%'")]
    assert sorted(seen) == sorted(every) and len(seen) == len(set(seen)) == 14
    assert "a-" not in (cursor or "")  # opaque: no id in the clear
    first, after = ids(tc, limit=3)
    assert first == ["new-4", "new-3", "new-2"] and after is not None and "new" not in after


def test_bad_parameters_are_a_400_naming_them(world: World, http: tuple[TestClient, Client]) -> None:
    tc, c = http
    seed(world, c)
    _, cursor = ids(tc, limit=2)
    for params, said in (
        ({"cursor": "garbage!"}, "cursor"),
        ({"cursor": cursor, "sort": "finished"}, "start from the first page"),
        ({"since": "yesterday"}, "since"),
        ({"input": "[1]"}, "JSON object"),
        ({"input": "{"}, "JSON object"),
        ({"input": "[" * 5000 + "]" * 5000}, "JSON object"),  # nested past what Python parses
        ({"input": '{"x": {}}'}, "not an empty object or array: x has none"),
        ({"input": '{"a": {"b": []}}'}, "not an empty object or array: a.b has none"),
        ({"input": json.dumps({f"k{i}": i for i in range(17)})}, "16 values at most, got 17"),
        ({"state": "sleeping"}, "no run state"),
        ({"priority": "urgent"}, "no priority"),
        ({"sort": "name"}, "no sort"),
        ({"limit": "0"}, "1 to 10000"),
    ):
        got = tc.get("/api/runs", params=params, headers=HEADERS)
        assert got.status_code == 400 and said in got.json()["error"], (params, got.text)


def test_a_cursor_is_signed_and_bound_to_its_list_and_filters(
    world: World, http: tuple[TestClient, Client]
) -> None:
    tc, c = http
    seed(world, c)
    world.sql("UPDATE runs SET state = 'waiting', reason = 'in_doubt' WHERE id IN ('x-0', 'x-1')")
    _, given = ids(tc, workflow="wa", limit=2)
    assert given is not None
    assert ids(tc, workflow="wa", limit=2, cursor=given)[0] == ["a-4", "a-3"]  # its own list
    assert ids(tc, workflow="wa", since="2000-01-01", limit=2)[1] != given  # the filters change it
    inner, _, signature = given.rpartition(".")
    flipped = signature[:-1] + ("0" if signature[-1] != "0" else "1")
    for path, params in (
        ("/api/runs", {"tenant": "t1", "cursor": given}),  # the same sort, other filters
        ("/api/runs", {"workflow": "wb", "cursor": given}),
        ("/api/runs", {"cursor": given}),
        ("/api/in-doubt", {"cursor": given}),  # another list
        ("/api/runs", {"workflow": "wa", "cursor": inner}),  # unsigned, as before
        ("/api/runs", {"workflow": "wa", "cursor": inner + "." + flipped}),  # altered
        ("/api/runs", {"workflow": "wa", "cursor": "x" + given}),
    ):
        got = tc.get(path, params=params, headers=HEADERS)
        assert got.status_code == 400, (path, params, got.text)
        assert "start from the first page" in got.json()["error"], got.text
    for page in ("/", "/in-doubt"):  # the pages say so too, with a link to the first page
        got = tc.get(page, params={"cursor": given}, headers=HEADERS)
        assert got.status_code == 400 and "start from the first page" in got.text
        assert 'id="first-page"' in got.text
    page, more = ids(tc, in_doubt="1", limit=1)  # the in-doubt filter of the runs list ...
    assert page == ["x-1"] and more is not None
    refused = tc.get("/api/in-doubt", params={"cursor": more}, headers=HEADERS)
    assert refused.status_code == 400  # ... is another list than the in-doubt page's


def test_counts_by_state_are_bounded_and_say_so(
    world: World, http: tuple[TestClient, Client], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each state is counted up to COUNTED runs (10,000): past it, the API lists the state in
    ``counts_capped`` and the page shows "10,000+"; a count reads no more than that, at any size."""
    monkeypatch.setattr(admin, "COUNTED", 3)
    monkeypatch.setattr(lists, "COUNTED", 3)
    tc, c = http
    seed(world, c)  # 13 queued, 1 waiting
    got = tc.get("/api/runs", headers=HEADERS).json()
    assert got["counts"] == {"queued": 3, "waiting": 1} and got["counts_capped"] == ["queued"]
    page = tc.get("/", headers={**HEADERS, "Accept": "text/html"}).text
    assert "queued <b>3+</b>" in page and "waiting <b>1</b>" in page


def test_the_page_filters_and_pages(world: World, http: tuple[TestClient, Client]) -> None:
    tc, c = http
    seed(world, c)
    tc.headers.update(HEADERS)
    page = tc.get("/", params={"workflow": "wa", "priority": "high"})
    assert page.status_code == 200
    shown = re.findall(r'href="/runs/([^"]+)"', page.text)
    assert shown == [f"a-{i}" for i in reversed(range(7))] and 'id="next-page"' not in page.text
    for i in range(60):
        c.enqueue("wz", {}, run_id=f"z-{i:02}")
    page = tc.get("/", params={"workflow": "wz"})
    first = re.findall(r'href="/runs/([^"]+)"', page.text)
    more = re.search(r'id="next-page"|href="/\?([^"]+)" id="next-page"', page.text)
    assert len(first) == 50 and more is not None
    link = re.search(r'href="/\?([^"]+)" id="next-page"', page.text)
    assert link is not None and "workflow=wz" in link.group(1)
    rest = re.findall(r'href="/runs/([^"]+)"', tc.get("/?" + link.group(1).replace("&amp;", "&")).text)
    assert sorted(first + rest) == [f"z-{i:02}" for i in range(60)]
    bad = tc.get("/", params={"since": "soon"})
    assert bad.status_code == 400 and "since must be an ISO 8601 time" in bad.text


def test_cancel_resume_and_retry_record_the_principal(world: World) -> None:
    users = world.tmp / "users.toml"
    olga = {"Authorization": f"Bearer {add_user(users, 'olga', ['operators'])}"}
    bob = {"Authorization": f"Bearer {add_user(users, 'bob', ['viewers'])}"}
    settings = world.settings(users=str(users))
    with Client(settings=settings) as c, TestClient(create_app(settings), base_url="http://127.0.0.1") as tc:
        c.enqueue("wr", {"n": 1}, run_id="r-1")
        assert tc.post("/api/runs/r-1/retry", headers=olga).status_code == 409  # not finished yet
        assert tc.post("/api/runs/r-1/cancel", headers=bob).status_code == 403  # a viewer
        assert tc.post("/api/runs/r-1/cancel", headers=olga).json()["state"] == "cancelled"
        assert tc.post("/api/runs/r-1/retry", headers=bob).status_code == 403
        again = tc.post("/api/runs/r-1/retry", headers=olga).json()
        assert again["parent_id"] == "r-1" and again["input"] == {"n": 1} and again["state"] == "queued"
        world.sql("UPDATE runs SET state = 'waiting', reason = 'timer' WHERE id = %s", again["id"])
        assert tc.post(f"/api/runs/{again['id']}/resume", headers=olga).status_code == 200
        said = {e["kind"]: e["detail"] for e in c.events("r-1") + c.events(again["id"])}
    assert said["continued"]["as"] == again["id"]
    for kind in ("cancel_requested", "continued", "resumed"):
        assert said[kind]["principal"] == "olga" and said[kind]["how"] == "token", (kind, said)


def test_schedules_paused_resumed_and_triggered_by_operators(world: World) -> None:
    users = world.tmp / "users.toml"
    olga = {"Authorization": f"Bearer {add_user(users, 'olga', ['operators'])}"}
    bob = {"Authorization": f"Bearer {add_user(users, 'bob', ['viewers'])}"}
    world.sql(
        "INSERT INTO schedules (name, workflow, queue, cron, tz, input, catch_up) "
        "VALUES ('nightly', 'report', 'default', '0 3 * * *', 'UTC', '{\"day\": 1}', 'latest')"
    )
    settings = world.settings(users=str(users))
    with Client(settings=settings) as c, TestClient(create_app(settings), base_url="http://127.0.0.1") as tc:
        page = tc.get("/schedules", headers=bob)
        assert page.status_code == 200 and "nightly" in page.text and 'class="pause"' not in page.text
        assert tc.post("/api/schedules/nightly/pause", headers=bob).status_code == 403
        assert tc.post("/api/schedules/nightly/pause", headers=olga).status_code == 200
        assert c.schedules()[0]["paused"] and "<b>paused</b>" in tc.get("/schedules", headers=olga).text
        assert tc.post("/api/schedules/nightly/resume", headers=olga).status_code == 200
        assert not c.schedules()[0]["paused"]
        said = tc.post("/api/schedules/nightly/trigger", headers=olga).json()["message"]
        run_id = said.split("run ")[-1]
        assert c.status(run_id).input == {"day": 1}
        [triggered] = [e["detail"] for e in c.events(run_id) if e["kind"] == "triggered"]
        assert triggered["principal"] == "olga" and triggered["schedule"] == "nightly"
        assert tc.post("/api/schedules/missing/trigger", headers=olga).status_code == 404
        assert tc.post("/api/schedules/nightly/explode", headers=olga).status_code == 404
        tc.cookies.clear()
        form = tc.post("/schedules/nightly/pause", headers=olga, data={"csrf": "stale"})
        assert form.status_code == 403 and "CSRF" in form.text  # a form needs its token


def test_the_same_filters_in_outlast_runs(world: World, http: tuple[TestClient, Client]) -> None:
    _, c = http
    seed(world, c)

    def listed(*args: str) -> tuple[list[str], str | None]:
        done = world.cli("runs", *args)
        assert done.returncode == 0, done.stderr
        more = re.search(r"--cursor (\S+)", done.stderr)
        return [line.split()[0] for line in done.stdout.splitlines() if line != "no runs"], (
            more.group(1) if more else None
        )

    first, cursor = listed("--workflow", "wa", "--limit", "4")
    assert first == ["a-6", "a-5", "a-4", "a-3"] and cursor is not None
    assert listed("--workflow", "wa", "--limit", "4", "--cursor", cursor) == (["a-2", "a-1", "a-0"], None)
    assert listed("--tenant", "t1", "--priority", "high")[0] == [f"a-{i}" for i in reversed(range(7))]
    assert listed("--parent", "a-0")[0] == ["x-1", "x-0"] and listed("--in-doubt")[0] == ["x-1"]
    assert listed("--prefix", "b-")[0] == [f"b-{i}" for i in range(5)]
    assert listed("--input", '{"customer": "c-1"}', "--sort", "finished")[0][0] == "b-3"
    bad = world.cli("runs", "--input", "{nope")
    assert bad.returncode == 2 and "--input" in bad.stderr
    wrong = world.cli("runs", "--priority", "urgent")
    assert wrong.returncode == 2 and "urgent" in wrong.stderr


def test_batch_actions_on_a_filtered_list_confirm_their_runs(world: World) -> None:
    users = world.tmp / "users.toml"
    olga_token = add_user(users, "olga", ["operators"])
    olga = {"Authorization": f"Bearer {olga_token}"}
    bob = {"Authorization": f"Bearer {add_user(users, 'bob', ['viewers'])}"}
    settings = world.settings(users=str(users))
    with Client(settings=settings) as c, TestClient(create_app(settings), base_url="http://127.0.0.1") as tc:
        seed(world, c)
        wa = {"workflow": "wa"}
        conf = tc.get("/api/batch/cancel", params=wa, headers=olga).json()
        assert conf["count"] == 7
        confirmed = {"count": 7, "digest": conf["digest"]}
        assert tc.post("/api/batch/cancel", params=wa, headers=bob, json=confirmed).status_code == 403
        stale = tc.post("/api/batch/cancel", params=wa, headers=olga, json={**confirmed, "count": 6})
        assert stale.status_code == 409 and "7 runs match now" in stale.json()["error"]
        done = tc.post("/api/batch/cancel", params=wa, headers=olga, json=confirmed).json()
        assert sorted(done["done"]) == [f"a-{i}" for i in range(7)] and done["refused"] == {}
        assert {c.status(f"a-{i}").state for i in range(7)} == {"cancelled"}
        assert tc.get("/api/batch/cancel", params=wa, headers=olga).json()["count"] == 0
        conf = tc.get("/api/batch/retry", params=wa, headers=olga).json()
        assert conf["count"] == 7 and conf["states"] == {"cancelled": 7}
        confirmed = {"count": 7, "digest": conf["digest"]}
        retried = tc.post("/api/batch/retry", params=wa, headers=olga, json=confirmed).json()
        assert len(retried["done"]) == 7
        kinds = [e for e in c.events("a-3") if e["kind"] in ("cancel_requested", "continued")]
        assert [e["detail"]["principal"] for e in kinds] == ["olga", "olga"]

        # The page: a confirmation that shows the count, then the act (a session's form, CSRF).
        page = tc.get("/login")
        login_csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page.text)
        assert login_csrf is not None
        tc.post("/login", data={"csrf": login_csrf.group(1), "token": olga_token}, follow_redirects=False)
        listed = tc.get("/", params={"queue": "other"})
        assert 'id="batch-cancel"' in listed.text
        confirm = tc.get("/batch/cancel", params={"queue": "other"})
        assert confirm.status_code == 200 and "5 runs of this list are to cancel" in confirm.text
        csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', confirm.text)
        digest = re.search(r'name="digest" value="([0-9a-f]+)"', confirm.text)
        assert csrf is not None and digest is not None
        shown = {"count": "5", "digest": digest.group(1)}
        forged = tc.post("/batch/cancel?queue=other", data={"csrf": "0" * 32, **shown})
        assert forged.status_code == 403 and {c.status(f"b-{i}").state for i in range(5)} == {"queued"}
        acted = tc.post("/batch/cancel?queue=other", data={"csrf": csrf.group(1), **shown})
        assert acted.status_code == 200 and "cancel: 5 runs done" in acted.text
        assert {c.status(f"b-{i}").state for i in range(5)} == {"cancelled"}


def test_resume_accepting_a_program_change_shows_what_changed(world: World) -> None:
    users = world.tmp / "users.toml"
    olga_token = add_user(users, "olga", ["operators"])
    settings = world.settings(users=str(users))
    with Client(settings=settings) as c, TestClient(create_app(settings), base_url="http://127.0.0.1") as tc:
        c.enqueue("wp", {}, run_id="p-1")
        world.sql("UPDATE runs SET state = 'waiting', reason = 'program_changed', program = 'v1:aaa'")
        world.sql(
            "INSERT INTO events (run_id, kind, detail) VALUES ('p-1', 'waiting', "
            """'{"reason": "program_changed", "message": "admitted by v1:aaa; the workers serve v2:bbb"}')"""
        )
        page = tc.get("/login")
        login_csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page.text)
        assert login_csrf is not None
        tc.post("/login", data={"csrf": login_csrf.group(1), "token": olga_token}, follow_redirects=False)
        assert 'id="accept"' in tc.get("/runs/p-1").text
        confirm = tc.get("/runs/p-1/accept")
        assert "v1:aaa" in confirm.text and "the workers serve v2:bbb" in confirm.text
        csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', confirm.text)
        assert csrf is not None
        tc.post("/runs/p-1/resume", data={"csrf": csrf.group(1), "accept_program_change": "yes"})
        [resumed] = [e["detail"] for e in c.events("p-1") if e["kind"] == "resumed"]
        assert resumed["accept_program_change"] is True and resumed["principal"] == "olga"
        assert tc.get("/runs/p-1/accept").status_code == 409  # no longer waiting for a change
