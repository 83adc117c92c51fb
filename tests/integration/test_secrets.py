"""Secret tool arguments are never stored in clear: not in the database (a dump of the test's
schema), not in the workers' logs, not in an exported bundle — through a tool that raises with the
secret in its message, a worker killed after the intention of a secret call, and its resume.
Real worker processes, real Postgres and Redis (tests/apps/secret.py)."""

from __future__ import annotations

import shutil
import stat
import subprocess
import uuid
from pathlib import Path

import pytest

from outlast import Client
from outlast._model import RunRecord
from tests.conftest import World, wait_for
from tests.crash import journal, killed, last_message, settled

APP = "tests.apps.secret:app"
KEY = "u2Xq_9fRk4TzLm1Vb7Nc0Hs6Jd3Pw8Ge5Ay-Ko"  # OUTLAST_SECRET_KEY


def dump(world: World) -> str:
    """Every row of the test's schema as text: ``pg_dump`` when on PATH and it can dump this
    server (not one older than the server, as beside the embedded Postgres), else each table
    SELECTed."""
    if shutil.which("pg_dump"):
        done = subprocess.run(
            ["pg_dump", f"--schema={world.schema}", world.database_url], capture_output=True, text=True
        )
        if done.returncode == 0:
            return done.stdout
    tables = world.sql(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", world.schema
    )
    return "\n".join(str(row) for (t,) in tables for row in world.sql(f'SELECT t::text FROM "{t}" t'))


def secret_world(world: World, secret: str, **env: str) -> dict[str, str]:
    """The workers' environment: the app's secret (as a vault client would hand it over) and the
    key of the keyed hash."""
    return {"SECRET_API_KEY": secret, "OUTLAST_SECRET_KEY": KEY, **env}


def test_a_secret_is_never_stored_logged_or_exported(world: World, tmp_path: Path) -> None:
    secret = f"sk-live-{uuid.uuid4().hex}"
    client = Client(settings=world.settings())
    try:
        rid = client.enqueue("charge", {"who": "alice", "amount": 5}).id
        # Killed right after the intention of the secret call `pay`: a gap the next worker fills.
        killed(world.worker(APP, **secret_world(world, secret, OUTLAST_FAILPOINTS="after_intention:pay")))
        entries = journal(world, rid)
        assert [(k, op) for _s, k, op, _b in entries][-1] == ("intention", "op-3")
        sealed = entries[-1][3]["args"]["api_key"]
        assert sealed["secret"].startswith("hmac-sha256:") and len(sealed["secret"]) == 12 + 64

        world.worker(APP, **secret_world(world, secret))
        run = settled(client, rid)
        assert run.state == "succeeded", run
        assert run.result["seen"] == "alice: right key"
        # The tool's exception: its type kept, the secret in its message redacted.
        assert run.result["refused"] == "the service refused key [secret] (and said so)"
        # The pending `pay` was dispatched again with the value of the replayed call, once.
        assert run.result["paid"] == {"paid": 5, "with": "right key"}
        assert world.sql("SELECT what FROM executions WHERE run_id = %s", rid) == [("pay 5: right key",)]
        errors = [b["error"] for _s, k, _op, b in journal(world, rid) if k == "result" and "error" in b]
        assert errors == [
            {"type": "PermissionError", "message": "the service refused key [secret] (and said so)"}
        ]

        bundle = tmp_path / "bundle"
        out = world.cli("export", rid, "-o", str(bundle))
        assert out.returncode == 0, out.stderr
    finally:
        client.close()

    assert stat.S_IMODE(bundle.stat().st_mode) == 0o700
    files = sorted(bundle.iterdir())
    assert len(files) == 5 and all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in files)
    exported = "\n".join(f.read_text() for f in files)
    database = dump(world)
    logs = world.logs()
    # What the test greps is there to be found: the sealed hash, the redacted message.
    assert sealed["secret"] in database and sealed["secret"] in exported
    assert "[secret]" in logs and "[secret]" in database and "[secret]" in exported
    for where, text in (("the database", database), ("the logs", logs), ("the bundle", exported)):
        assert secret not in text, f"the secret is in {where}"


def test_a_known_secret_is_masked_in_live_output_and_in_another_tools_arguments(world: World) -> None:
    """A tool that streams its secret key, the workflow that streams it after, and another tool given
    the key inside arguments that are not secret: no chunk in Redis, no reader and no row holds it."""
    secret = f"sk-live-{uuid.uuid4().hex}"
    with Client(settings=world.settings()) as client:
        rid = client.enqueue("streams_key", {}).id
        world.worker(APP, **secret_world(world, secret))
        assert settled(client, rid).state == "succeeded"
        read = [item.data for item in client.stream(rid) if not isinstance(item, RunRecord)]
    assert read == [
        "calling with [secret]",
        {"key": "[secret]", "note": "Bearer [secret]"},
        "the workflow streams [secret]",
    ]
    raw = world.redis().xrange(f"{world.prefix}:live:{{{rid}}}")
    assert raw and secret.encode() not in repr(raw).encode()
    asked = [
        b["args"] for _s, k, _op, b in journal(world, rid) if k == "intention" and b["tool"] == "ask_model"
    ]
    assert asked == [{"prompt": "use the key [secret] to answer", "url": "https://x.test/?k=[secret]"}]
    assert secret not in dump(world)


def test_another_secret_on_replay_is_refused_by_name(world: World) -> None:
    first, second = f"sk-one-{uuid.uuid4().hex}", f"sk-two-{uuid.uuid4().hex}"
    with Client(settings=world.settings()) as client:
        rid = client.enqueue("charge", {"who": "bob", "amount": 1}).id
        # Killed once pay's intention carried lookup's (held) result into the journal.
        killed(world.worker(APP, **secret_world(world, first, OUTLAST_FAILPOINTS="after_intention:pay")))
        world.worker(APP, **secret_world(world, second))
        run = settled(client, rid)
        assert (run.state, run.reason) == ("waiting", "resume_impossible")
        message = last_message(world, rid)
        assert "resume impossible at crossing #1" in message
        assert "secret argument 'api_key' has another value than journaled" in message
        assert first not in message and second not in message
        assert world.sql("SELECT count(*) FROM executions WHERE run_id = %s", rid) == [(0,)]


def test_an_approval_shows_a_secret_masked_and_its_hash_binds_it(world: World) -> None:
    secret = f"sk-appr-{uuid.uuid4().hex}"
    with Client(settings=world.settings()) as client:
        rid = client.enqueue("approved_charge", {"amount": 5}).id
        world.worker(APP, **secret_world(world, secret))
        wait_for(lambda: client.status(rid).state == "awaiting_approval", 30, 0.2, "the approval request")
        (asked,) = client.approvals(rid)
        assert asked["args"]["amount"] == 5
        assert asked["args"]["api_key"]["secret"].startswith("hmac-sha256:")
        shown = world.cli("status", rid)
        assert "hmac-sha256:" in shown.stdout and secret not in shown.stdout
        # The approver revises the amount and leaves the masked key as shown: the workflow gets
        # its own value back (never read from storage), and pays with it.
        client.revise(
            rid,
            asked["op_id"],
            approver="ann",
            comment="7, not 5",
            args_hash=asked["args_hash"],
            args={**asked["args"], "amount": 7},
        )
        run = settled(client, rid)
        assert (run.state, run.result) == ("succeeded", {"paid": 7, "with": "right key"})
    assert secret not in dump(world)


def test_a_worker_for_secret_arguments_needs_the_key(world: World) -> None:
    done = world.cli("worker", APP, SECRET_API_KEY="unused", OUTLAST_SECRET_KEY="")
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines[-1].startswith("outlast: error: OUTLAST_SECRET_KEY is not set")
    assert "refuse(api_key)" in lines[-1] and "Traceback" not in done.stderr


@pytest.mark.parametrize("value", ["short", "x" * 31])
def test_a_short_key_is_refused_without_showing_it(world: World, value: str) -> None:
    done = world.cli("worker", APP, OUTLAST_SECRET_KEY=value)
    assert done.returncode == 2
    assert "OUTLAST_SECRET_KEY must be 32 or more printable characters" in done.stderr
    assert value not in done.stderr


@pytest.mark.parametrize("value", ["a" * 32, "password" * 4])
def test_a_predictable_key_is_refused_saying_how_to_make_one(world: World, value: str) -> None:
    done = world.cli("worker", APP, OUTLAST_SECRET_KEY=value)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines[-1].startswith("outlast: error: OUTLAST_SECRET_KEY is too predictable"), done.stderr
    assert 'python -c "import secrets; print(secrets.token_urlsafe(32))"' in lines[-1]
    assert value not in done.stderr and "Traceback" not in done.stderr


def test_the_key_is_in_no_display_of_the_settings(world: World) -> None:
    s = world.settings(secret_key=KEY)
    assert s.secret_key == KEY
    assert KEY not in repr(s) and KEY not in str(s)
