"""The `outlast` command as an operator uses it, in real processes."""

from __future__ import annotations

import csv
import json

from tests.conftest import World


def test_enqueue_wait_status_events_verify_export(world: World) -> None:
    world.worker()
    p = world.cli("enqueue", "squares", "--input", '{"n": 3}', "--run-id", "cli-1", "--wait")
    assert p.returncode == 0, p.stderr
    assert "run cli-1 succeeded" in p.stdout
    assert '"values"' in p.stdout and "fragile broke on 3" in p.stdout

    boom = world.cli("enqueue", "boom", "--run-id", "cli-boom", "--wait")
    assert boom.returncode == 4, (boom.returncode, boom.stdout, boom.stderr)  # failed: its own exit code
    assert "run cli-boom failed" in boom.stdout

    status = world.cli("status", "cli-1")
    assert status.returncode == 0
    assert "succeeded" in status.stdout and "5 entries" in status.stdout and "chain verifies" in status.stdout
    as_json = json.loads(world.cli("status", "cli-1", "--json").stdout)
    assert as_json["chain"]["verifies"] and as_json["run"]["state"] == "succeeded"

    events = world.cli("events", "cli-1", "--follow").stdout
    assert "enqueued" in events and "succeeded" in events

    assert world.cli("verify", "cli-1").returncode == 0
    world.sql("UPDATE journal SET body = replace(body, '\"ok\":4', '\"ok\":5') WHERE run_id = 'cli-1'")
    bad = world.cli("verify", "cli-1")
    # (a read journals its result only: square(2)'s is the third entry)
    assert bad.returncode == 1 and "journal altered at crossing #3" in bad.stderr

    out = world.tmp / "bundle"
    assert world.cli("export", "cli-1", "-o", str(out)).returncode == 0
    names = sorted(f.name for f in out.iterdir())
    assert names == ["env.txt", "events.jsonl", "journal.jsonl", "last_state.json", "tool_calls.csv"]
    with (out / "tool_calls.csv").open() as f:
        calls = list(csv.DictReader(f))
    assert [c["tool"] for c in calls] == ["square", "square", "square", "fragile"]
    assert calls[-1]["status"] == "error" and "fragile broke" in calls[-1]["error"]
    assert len((out / "journal.jsonl").read_text().splitlines()) == 5
    assert "ALTERED at #3" in (out / "env.txt").read_text()


def test_user_mistakes_print_one_line_and_no_traceback(world: World) -> None:
    cases = [
        (("status", "nope"), "no run 'nope'"),
        (("enqueue", "echo", "--input", "{bad"), "not valid JSON"),
        (("enqueue", "echo", "--input", "[1]"), "must be a JSON object"),
        (("runs", "--state", "bogus"), "no run state 'bogus'"),
        (
            ("--database-url", "postgresql://u:secret@127.0.0.1:1/x", "runs"),
            "postgresql://u:***@127.0.0.1:1/x",
        ),
        (("resolve", "nope", "op-1", "--executed"), "no run 'nope'"),
    ]
    for args, expected in cases:
        p = world.cli(*args)
        assert p.returncode != 0, args
        assert expected in p.stderr, (args, p.stderr)
        assert "Traceback" not in p.stderr and "secret" not in p.stderr


def test_every_option_names_its_environment_variable(world: World) -> None:
    for cmd in (["--help"], ["worker", "--help"], ["enqueue", "--help"]):
        out = world.cli(*cmd).stdout
        assert "OUTLAST_" in out
    worker = world.cli("worker", "--help").stdout
    for var in ("OUTLAST_CONCURRENCY", "OUTLAST_PROCESSES", "OUTLAST_LEASE_TTL", "OUTLAST_GRACE"):
        assert var in worker
