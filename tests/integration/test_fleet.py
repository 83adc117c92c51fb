"""The fleet as an operator sees it, in real processes: `outlast health`, the workers' heartbeat
records (`outlast workers`), `outlast queues`, `outlast dead-letters` and `outlast runs` filters."""

from __future__ import annotations

import json
import signal
import subprocess
from datetime import UTC, datetime, timedelta

from outlast import Client
from outlast.store import SCHEMA_VERSION
from tests.conftest import World, drop_schemas, migrate_schema, wait_for


def _workers(world: World) -> list[dict[str, object]]:
    p = world.cli("workers", "--json")
    assert p.returncode == 0, p.stderr
    rows: list[dict[str, object]] = json.loads(p.stdout)
    return rows


def _one_line_error(p: subprocess.CompletedProcess[str], code: int, *expected: str) -> None:
    assert p.returncode == code, (p.returncode, p.stdout, p.stderr)
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    for text in expected:
        assert text in p.stderr, p.stderr


def test_health_checks_servers_schema_and_a_live_worker(world: World) -> None:
    ok = world.cli("health")
    assert ok.returncode == 0, ok.stderr
    assert "postgres answers" in ok.stdout and "redis answers" in ok.stdout and "version" in ok.stdout

    _one_line_error(world.cli("health", "--worker"), 1, "unhealthy", "no live worker", "outlast worker")
    _one_line_error(world.cli("--redis-url", "redis://127.0.0.1:1/0", "health"), 1, "cannot reach Redis")
    down = world.cli("--database-url", "postgresql://u:secret@127.0.0.1:1/x", "health")
    _one_line_error(down, 1, "cannot reach Postgres at postgresql://u:***@127.0.0.1:1/x")
    assert "secret" not in down.stderr
    assert "LISTEN" not in down.stderr  # Postgres down says it all: no second line about LISTEN
    _one_line_error(world.cli("--schema", "t_nothing_here", "health"), 1, "no outlast schema", "migrate")
    old = f"{world.schema}_old"
    migrate_schema(world.database_url, old)
    try:
        world.sql(f"UPDATE {old}.outlast_meta SET value = '4' WHERE key = 'schema_version'")
        _one_line_error(world.cli("--schema", old, "health"), 1, "version 4, older", "run: outlast migrate")
    finally:
        drop_schemas(world.database_url, old)

    world.worker()
    wait_for(lambda: world.cli("health", "--worker").returncode == 0, what="a live worker heartbeat")
    assert "1 live worker(s)" in world.cli("health", "--worker").stdout


def test_each_worker_publishes_a_heartbeat_record_deleted_on_a_clean_stop(world: World) -> None:
    # A record left by a worker silent for two hours: the first sweep deletes it.
    world.sql(
        "INSERT INTO workers (name, host, pid, queues, concurrency, lease_ttl, last_beat)"
        " VALUES ('old-1', 'h', 1, '{default}', 1, 2, now() - interval '2 hours')"
    )
    a = world.worker("tests.apps.basic:app", "-q", "default", "-q", "other", "-c", "3")
    (rec,) = wait_for(lambda: [w for w in _workers(world) if w["name"] != "old-1"], what="A's record")
    assert rec["pid"] == a.pid and rec["live"] and rec["queues"] == ["default", "other"]
    assert rec["concurrency"] == 3 and rec["runs_held"] == 0
    programs = rec["programs"]
    assert isinstance(programs, dict) and {"echo", "slow"} <= set(programs)
    wait_for(lambda: world.sql("SELECT count(*) FROM workers WHERE name = 'old-1'") == [(0,)], what="sweep")

    with Client(settings=world.settings()) as c:
        c.enqueue("slow", {"seconds": 3})
        wait_for(lambda: _workers(world)[0]["runs_held"] == 1, what="the run held in the record")
    text = world.cli("workers").stdout
    assert str(a.pid) in text and "live" in text and "default,other" in text and "echo=" in text
    assert "THREADS" in text and {"tool_threads", "tool_threads_busy"} <= set(_workers(world)[0])
    # Which schema version its code knows: in a rolling upgrade, the workers still on old code.
    assert _workers(world)[0]["code_version"] == SCHEMA_VERSION
    assert f"code for schema {SCHEMA_VERSION}" in text

    a.send_signal(signal.SIGTERM)
    assert a.wait(30) == 0
    assert _workers(world) == []  # a clean stop deletes the record

    b = world.worker()
    wait_for(lambda: _workers(world), what="B's record")
    b.send_signal(signal.SIGKILL)
    b.wait(10)
    world.sql("UPDATE workers SET last_beat = now() - interval '1 minute'")  # 3 TTLs are 6 s
    (gone,) = _workers(world)
    assert gone["pid"] == b.pid and not gone["live"]
    assert "gone" in world.cli("workers").stdout
    _one_line_error(world.cli("health", "--worker"), 1, "no live worker")


def test_a_fixed_name_keeps_a_true_record_and_pool_children_get_one_each(world: World) -> None:
    # The record a worker of the same name left before a restart (another pid, queue, start).
    world.sql(
        "INSERT INTO workers (name, host, pid, queues, concurrency, lease_ttl, started_at)"
        " VALUES ('fixed', 'h', 1, '{other}', 1, 2, now() - interval '1 hour')"
    )
    a = world.worker("tests.apps.basic:app", "--name", "fixed", "-c", "3")
    (rec,) = wait_for(lambda: [w for w in _workers(world) if w["pid"] == a.pid], what="A's beat")
    assert rec["name"] == "fixed" and rec["host"] != "h" and rec["queues"] == ["default"]
    assert rec["concurrency"] == 3 and rec["programs"]
    started = world.sql("SELECT now() - started_at < interval '1 minute' FROM workers WHERE name = 'fixed'")
    assert started == [(True,)]
    a.send_signal(signal.SIGTERM)
    assert a.wait(30) == 0

    pool = world.worker("tests.apps.basic:app", "--name", "fixed", "--processes", "2")
    names = wait_for(lambda: len(recs := _workers(world)) == 2 and recs, what="a record per child")
    assert sorted(w["name"] for w in names) == ["fixed-1", "fixed-2"]
    assert len({w["pid"] for w in names}) == 2
    pool.send_signal(signal.SIGTERM)
    assert pool.wait(30) == 0
    assert _workers(world) == []


def test_queues_show_stream_figures_and_unfinished_runs(world: World) -> None:
    with Client(settings=world.settings()) as c:
        ids = [c.enqueue("echo", {"i": i}).id for i in range(3)]
        c.enqueue("echo", {}, queue="other")
    r = world.redis()
    stream = f"{world.prefix}:{{default}}:runs"
    r.xgroup_create(stream, "workers", id="0")
    r.xreadgroup("workers", "someone", {stream: ">"}, count=1)  # delivered, never acknowledged
    r.xadd(f"{world.prefix}:{{default}}:dead", {"garbage": "1", "_reason": "test"})

    p = world.cli("queues", "--json")
    assert p.returncode == 0, p.stderr
    rows = {q["queue"]: q for q in json.loads(p.stdout)}
    assert set(rows) == {"default", "other"}
    d = rows["default"]
    assert (d["length"], d["pending"], d["dead_letters"]) == (3, 1, 1)
    assert 0 <= d["oldest_pending_age"] < 60
    assert d["runs"] == {"queued": 3}
    assert (rows["other"]["length"], rows["other"]["pending"], rows["other"]["runs"]) == (1, 0, {"queued": 1})
    assert rows["other"]["oldest_pending_age"] is None

    text = world.cli("queues", "default").stdout
    assert "default" in text and "other" not in text and "queued 3" in text
    _one_line_error(world.cli("queues", "a b"), 2, "queue name")

    world.worker()
    with Client(settings=world.settings()) as c:
        for rid in ids:
            assert c.wait(rid, timeout=30).state == "succeeded"


def test_dead_letters_are_requeued_through_postgres_or_dropped_when_final(world: World) -> None:
    dead = f"{world.prefix}:{{default}}:dead"
    r = world.redis()
    with Client(settings=world.settings()) as c:
        done = c.enqueue("echo", {"done": True})
        world.worker()
        assert c.wait(done.id, timeout=30).state == "succeeded"
        world.stop_all()
        waiting = c.enqueue("echo", {"waits": True}, queue="other")  # no worker serves 'other'
    final_id = r.xadd(dead, {"run": done.id, "_entry": "1-0", "_reason": "test"})
    queued_id = r.xadd(dead, {"run": waiting.id, "_entry": "2-0", "_reason": "belongs elsewhere"})
    nobody_id = r.xadd(dead, {"run": "no-such-run", "_entry": "3-0", "_reason": "no run 'no-such-run'"})
    junk_id = r.xadd(dead, {"junk": "1", "_entry": "4-0", "_reason": "no 'run' field"})

    listing = world.cli("dead-letters")
    assert listing.returncode == 0, listing.stderr
    assert all(i in listing.stdout for i in (final_id, queued_id, nobody_id, junk_id))
    assert "belongs elsewhere" in listing.stdout
    assert len(json.loads(world.cli("dead-letters", "--json").stdout)) == 4

    p = world.cli("dead-letters", "--requeue", final_id)
    assert p.returncode == 0, p.stderr
    assert f"run '{done.id}' is succeeded: dropped, nothing requeued" in p.stdout

    p = world.cli("dead-letters", "--requeue", queued_id)
    assert p.returncode == 0, p.stderr
    assert f"run '{waiting.id}' (queued) requeued on queue 'other'" in p.stdout  # the run's own queue
    assert world.sql("SELECT kind FROM events WHERE run_id = %s ORDER BY id", waiting.id) == [
        ("enqueued",),
        ("requeued",),
    ]
    assert r.xlen(f"{world.prefix}:{{other}}:runs") == 2  # its enqueue's entry, and this one

    _one_line_error(world.cli("dead-letters", "--requeue", nobody_id), 1, "no run 'no-such-run'", "--drop")
    _one_line_error(world.cli("dead-letters", "--requeue", final_id), 1, f"no dead letter {final_id}")
    _one_line_error(world.cli("dead-letters", "--requeue", "x; y"), 2, "not a dead letter's id")
    _one_line_error(world.cli("dead-letters", "--drop", "99999999999999999999-0"), 2, "dead letter")
    _one_line_error(world.cli("dead-letters", "--all", "--drop", junk_id), 2, "give one of")

    p = world.cli("dead-letters", "--all")  # what names no run stays, and says so
    assert p.returncode == 0 and "no 'run' field" in p.stderr and "no-such-run" in p.stderr
    assert [e[0] for e in r.xrange(dead)] == [nobody_id, junk_id]
    assert world.cli("dead-letters", "--drop", junk_id).returncode == 0
    assert [e[0] for e in r.xrange(dead)] == [nobody_id]

    world.worker("tests.apps.basic:app", "-q", "other")
    with Client(settings=world.settings()) as c:
        assert c.wait(waiting.id, timeout=30).state == "succeeded"
    assert world.sql("SELECT count(*) FROM executions WHERE run_id = %s", waiting.id) == [(1,)]


def test_runs_filter_by_state_workflow_queue_and_since(world: World) -> None:
    with Client(settings=world.settings()) as c:
        old = c.enqueue("echo", {"old": 1})
        new_echo = c.enqueue("echo", {"new": 1}, queue="other")
        new_slow = c.enqueue("slow", {})
    world.sql("UPDATE runs SET created_at = now() - interval '3 hours' WHERE id = %s", old.id)

    def ids(*args: str) -> set[str]:
        p = world.cli("runs", "--json", *args)
        assert p.returncode == 0, p.stderr
        return {r["id"] for r in json.loads(p.stdout)}

    assert ids() == {old.id, new_echo.id, new_slow.id}
    assert ids("--workflow", "echo") == {old.id, new_echo.id}
    assert ids("--queue", "other") == {new_echo.id}
    assert ids("--since", "2h") == {new_echo.id, new_slow.id}
    assert ids("--since", "200m", "--workflow", "echo") == {old.id, new_echo.id}
    assert ids("--since", "2.5h") == {new_echo.id, new_slow.id} and len(ids("--since", "1w")) == 3
    two_hours_ago = (datetime.now(UTC) - timedelta(hours=2)).replace(tzinfo=None).isoformat()
    assert ids("--since", two_hours_ago) == {new_echo.id, new_slow.id}  # naive: UTC
    assert ids("--state", "queued", "--workflow", "slow") == {new_slow.id}
    assert ids("--workflow", "nothing") == set()
    assert new_slow.id in world.cli("runs", "--since", "1d").stdout
    _one_line_error(world.cli("runs", "--since", "yesterday"), 2, "--since", "neither an age")
    _one_line_error(world.cli("runs", "--since", "99999999999d"), 2, "--since", "too far back")
    _one_line_error(world.cli("runs", "--queue", "a b"), 2, "queue name")
