"""Live lists: the runs list, the approvals inbox and the in-doubt page are woken by Postgres
(LISTEN on every run's events, migration 0020), not by polling; behind a transaction pooler
(a real pgbouncer), where notifications do not arrive, the stream polls and says so; and the
in-doubt page lists every run in doubt, a page at a time."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import unquote, urlsplit

import httpx2 as httpx
import psycopg
import pytest
from starlette.testclient import TestClient

from outlast import Client
from outlast.dashboard import create_app, live
from outlast.identity import add_user
from outlast.settings import Settings
from tests.conftest import World, wait_for
from tests.dashboard import dashboard_process, free_port, served
from tests.faults.pgbouncer import pgbouncer_binary


def people(world: World) -> tuple[Settings, dict[str, str]]:
    users = world.tmp / "users.toml"
    token = add_user(users, "bob", ["viewers"])
    return world.settings(users=str(users)), {"Authorization": f"Bearer {token}"}


def events(url: str, headers: dict[str, str], timeout: float) -> Iterator[tuple[str, str]]:
    """The stream's events, (name, data), as they come; a read waits ``timeout`` at most."""
    with (
        httpx.Client(timeout=httpx.Timeout(5.0, read=timeout)) as h,
        h.stream("GET", url, headers=headers) as r,
    ):
        assert r.status_code == 200, r.read()
        name = ""
        for line in r.iter_lines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                yield name, line[6:]


@pytest.mark.parametrize("page", ["/", "/approvals", "/in-doubt"])
def test_the_lists_are_live(world: World, page: str) -> None:
    settings, headers = people(world)
    with TestClient(create_app(settings), base_url="http://127.0.0.1") as tc:
        got = tc.get(page, headers=headers)
    assert got.status_code == 200 and 'data-live="/live?after=' in got.text and "data-live-region" in got.text


def test_changes_are_pushed_not_polled(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(live, "TICK", 600.0)  # a poll would come after the read times out
    monkeypatch.setattr(live, "HEARTBEAT", 600.0)
    settings, headers = people(world)
    with Client(settings=settings) as c, served(settings) as url:
        mark = world.sql("SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM events_id_seq")[0][0]
        stream = events(f"{url}/live?after={mark}", headers, timeout=30.0)
        assert next(stream) == ("mode", "pushed")
        c.enqueue("wa", {}, run_id="pushed-1")  # its 'enqueued' event wakes the stream
        name, data = next(stream)
        assert name == "change" and json.loads(data)["mark"] > mark


def listening(world: World) -> int:
    """How many backends listen for this test's schema: each registers its pid as a watcher."""
    rows = world.sql(
        "SELECT count(DISTINCT a.pid) FROM pg_stat_activity a JOIN watchers w ON w.pid = a.pid"
        " WHERE a.application_name = 'outlast-listen'"
    )
    return int(rows[0][0])


def test_every_stream_of_a_dashboard_shares_one_listening_connection(world: World) -> None:
    """Open pages cost the database one connection per dashboard process, not one each: else one
    viewer's tabs took 32 of them, and three dashboards the whole of max_connections."""
    settings, headers = people(world)
    with Client(settings=settings) as c:
        for i in range(6):
            c.enqueue("wa", {}, run_id=f"watched-{i}")
    with served(settings) as url:
        lists = [events(f"{url}/live?after=0", headers, timeout=30.0) for _ in range(6)]
        runs = [events(f"{url}/live?run=watched-{i}&after=0", headers, timeout=30.0) for i in range(6)]
        assert all(next(s) == ("mode", "pushed") for s in lists)
        assert all(next(s)[0] == "change" for s in runs)  # each run's 'enqueued', after its LISTEN
        assert listening(world) == 1
        # One connection, and each stream is still woken by its own runs' events.
        with Client(settings=settings) as c:
            c.enqueue("wa", {}, run_id="after")
            c.cancel("watched-3")
        assert all(next(s)[0] == "change" for s in lists)
        assert next(runs[3])[0] == "change"
        for s in lists + runs:
            s.close()
        wait_for(lambda: world.sql("SELECT count(*) FROM watchers") == [(0,)], 10, what="the LISTENs undone")
        assert listening(world) == 0


def test_a_killed_shared_listener_is_replaced(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(live, "HEARTBEAT", 600.0)  # only a notification, or the loss, wakes a stream
    settings, headers = people(world)
    with served(settings) as url:
        streams = [events(f"{url}/live?after=0", headers, timeout=30.0) for _ in range(3)]
        assert all(next(s) == ("mode", "pushed") for s in streams)
        pid = world.sql("SELECT DISTINCT pid FROM watchers")
        assert len(pid) == 1
        world.sql("SELECT pg_terminate_backend(%s)", pid[0][0])
        wait_for(lambda: listening(world) == 1, 10, what="a new listening connection")
        with Client(settings=settings) as c:
            c.enqueue("wa", {}, run_id="after-kill")
        assert all(next(s)[0] == "change" for s in streams)
        assert listening(world) == 1
        for s in streams:
            s.close()


def test_one_person_holds_a_bounded_number_of_streams(world: World) -> None:
    users = world.tmp / "users.toml"
    bob = {"Authorization": f"Bearer {add_user(users, 'bob', ['viewers'])}"}
    alice = {"Authorization": f"Bearer {add_user(users, 'alice', ['viewers'])}"}
    settings = world.settings(users=str(users), live_streams=2)
    with served(settings) as url:
        held = [events(f"{url}/live?after=0", bob, timeout=30.0) for _ in range(2)]
        assert all(next(s) == ("mode", "pushed") for s in held)
        third = httpx.get(f"{url}/live?after=0", headers=bob, timeout=10)
        assert third.status_code == 429
        assert "too many live pages open: bob may keep 2" in third.json()["error"]
        assert "OUTLAST_LIVE_STREAMS" in third.json()["error"]
        other = events(f"{url}/live?after=0", alice, timeout=30.0)  # another person is not refused
        assert next(other) == ("mode", "pushed")
        held.pop().close()  # a page closed gives its stream back

        def again() -> bool:
            with httpx.stream("GET", f"{url}/live?after=0", headers=bob, timeout=10) as r:
                return r.status_code == 200

        wait_for(again, 10, what="bob's closed stream given back")
        for s in [*held, other]:
            s.close()


@pytest.mark.parametrize("path", ["/live?after=0", "/live?run=long&after=0"])
def test_a_stream_ends_after_its_life(world: World, path: str) -> None:
    """A stream, a run's too (the run never finishes here), ends after OUTLAST_LIVE_SECONDS; the
    browser then opens a new one."""
    settings, headers = people(world)
    settings = settings.with_(live_seconds=1.0)
    with Client(settings=settings) as c:
        c.enqueue("wa", {}, run_id="long")
    with served(settings) as url:
        t = time.monotonic()
        got = list(events(f"{url}{path}", headers, timeout=30.0))
        assert time.monotonic() - t < 5
        assert ("final", "{}") not in got
        assert world.sql("SELECT count(*) FROM watchers") == [(0,)]


def test_a_run_stream_is_bounded_as_the_other_streams_are(world: World) -> None:
    """A run's live output stream (``outlast dashboard``, a process of its own) ends after
    OUTLAST_LIVE_SECONDS though the run never ends, counts against OUTLAST_LIVE_STREAMS while it is
    open, and gives its place back when it ends."""
    users = world.tmp / "users.toml"
    bob = {"Authorization": f"Bearer {add_user(users, 'bob', ['viewers'])}"}
    with Client(settings=world.settings()) as c:
        c.enqueue("wa", {}, run_id="long")  # no worker: it never ends
    bounds = {"OUTLAST_LIVE_SECONDS": "2", "OUTLAST_LIVE_STREAMS": "2"}
    base = dashboard_process(world, OUTLAST_USERS=str(users), **bounds)
    url = f"{base}/api/runs/long/stream"
    held = [events(url, bob, timeout=8.0) for _ in range(2)]
    t = time.monotonic()
    with ThreadPoolExecutor(2) as pool:
        ended = [pool.submit(list, s) for s in held]  # each read to its end
        time.sleep(0.5)
        third = httpx.get(url, headers=bob, timeout=10)
        assert third.status_code == 429 and "OUTLAST_LIVE_STREAMS" in third.json()["error"]
        assert [f.result() for f in ended] == [[], []]  # ended by its life, not by the read's timeout
    assert time.monotonic() - t < 6
    again = [events(url, bob, timeout=8.0) for _ in range(2)]  # both places given back
    assert [list(s) for s in again] == [[], []]


def answers(url: str) -> bool:
    try:
        with psycopg.connect(url, connect_timeout=2) as conn:
            conn.execute("SELECT 1")
        return True
    except psycopg.OperationalError:
        return False


@contextmanager
def pgbouncer(world: World) -> Iterator[str]:
    """A real pgbouncer in transaction mode before the test's Postgres, its schema set on every
    server connection; yields its URL."""
    port = free_port()
    here = Path(tempfile.mkdtemp(prefix="outlast-pgb-"))
    here.chmod(0o777)  # pgbouncer refuses to run as root: it runs as the server's user
    server = urlsplit(world.database_url)  # the machine's Postgres, or the embedded one's socket
    host, database = unquote(server.hostname or "127.0.0.1"), server.path.lstrip("/") or "postgres"
    (here / "users.txt").write_text('"postgres" ""\n')
    (here / "pgbouncer.ini").write_text(
        f"[databases]\n* = host={host} port={server.port or 5432} "
        f"connect_query='SET search_path TO {world.schema}'\n"
        f"[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\nauth_type = trust\n"
        f"auth_file = {here}/users.txt\npool_mode = transaction\nunix_socket_dir =\n"
        f"logfile = {here}/pgbouncer.log\nignore_startup_parameters = extra_float_digits,options\n"
    )
    for f in here.iterdir():
        f.chmod(0o666)
    owner = pwd.getpwuid(os.stat(host).st_uid).pw_name if host.startswith("/") else "postgres"
    user = ["-u", owner] if os.geteuid() == 0 else []
    proc = subprocess.Popen([pgbouncer_binary(), *user, str(here / "pgbouncer.ini")])
    try:
        url = f"postgresql://postgres@127.0.0.1:{port}/{database}"
        wait_for(lambda: answers(url), 15, what="pgbouncer to listen")
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.skipif(not Path("/usr/sbin/pgbouncer").exists(), reason="pgbouncer is not installed")
def test_behind_a_pooler_the_stream_polls_and_says_so(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(live, "TICK", 0.3)
    settings, headers = people(world)
    with pgbouncer(world) as pooled, Client(settings=settings) as c:
        behind = settings.with_(database_url=pooled)
        with served(behind) as url:
            stream = events(f"{url}/live?after=0", headers, timeout=30.0)
            assert next(stream) == ("mode", "polling")
            c.enqueue("wa", {}, run_id="polled-1")
            assert next(stream)[0] == "change"
            page = httpx.get(f"{url}/", headers=headers)
            assert page.status_code == 200 and "polled-1" in page.text  # the page works through it


def test_the_in_doubt_page_lists_every_run_in_doubt_paged(world: World) -> None:
    settings, headers = people(world)
    with Client(settings=settings) as c:
        for i in range(60):
            c.enqueue("wd", {}, run_id=f"d-{i:02}")
    world.sql("UPDATE runs SET state = 'waiting', reason = 'in_doubt'")
    with TestClient(create_app(settings), base_url="http://127.0.0.1") as tc:
        first = tc.get("/api/in-doubt", headers=headers).json()
        rest = tc.get("/api/in-doubt", params={"cursor": first["next"]}, headers=headers).json()
        assert rest["next"] is None
        listed = [r["run"]["id"] for r in first["runs"] + rest["runs"]]
        assert len(first["runs"]) == 50 and sorted(listed) == [f"d-{i:02}" for i in range(60)]
        page = tc.get("/in-doubt", headers=headers)
        assert 'id="next-page"' in page.text
