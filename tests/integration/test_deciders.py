"""Who decides, on real Postgres and Redis: an authenticated principal decides as itself (by name
or group), the CLI and a program decide as a declared name with their user and host recorded
beside it, a request made with ``authenticated=True`` is refused to them, and every decision and
resolution journals who, when (database clock), from where and why. The CLI's ``--args-hash`` is
required for approve and revise unless ``--yes-i-saw`` confirms on a terminal; ``users add``
prints a token once and keeps its hash.

Workers run in-process (the harness); the CLI runs as a real subprocess, on a pseudo-terminal
where a terminal is the point. Tools append to ``world`` (this process's own), so a test counts
what really happened.
"""

from __future__ import annotations

import getpass
import json
import os
import select
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from outlast import App
from outlast._journal import args_hash
from outlast.errors import DecisionRefused, InvalidInput
from outlast.identity import Principal, Users, hash_token
from outlast.testing import Harness, HarnessFactory, outlast_harness, outlast_servers

__all__ = ["outlast_harness", "outlast_servers"]  # the fixtures, without the plugin installed

ROOT = Path(__file__).resolve().parents[2]
ALICE = Principal("alice", frozenset({"ops"}), "token", "10.0.0.5")
BOB = Principal("bob", frozenset({"sec"}), "session", "10.0.0.9")
ME = {"principal": getpass.getuser(), "groups": [], "how": "cli", "where": socket.gethostname()}

world: list[tuple[str, dict[str, Any]]] = []  # (tool, args) of every dispatch
app = App()


@app.tool("publish")
def publish(text: str) -> dict[str, Any]:
    world.append(("publish", {"text": text}))
    return {"published": text}


@app.tool("pay")  # a plain side effect: no idempotency promise, no reconciler
def pay(amount: int) -> dict[str, Any]:
    world.append(("pay", {"amount": amount}))
    return {"paid": amount}


@app.workflow("ask")
async def ask(run: Any, text: str, approvers: list[str], authenticated: bool = False) -> dict[str, Any]:
    d = await run.approval("publish", {"text": text}, approvers=approvers, authenticated=authenticated)
    return {"by": d.approver, "done": await run.call("publish", **d.args)}


@app.workflow("pay_then_publish")
async def pay_then_publish(run: Any, amount: int) -> dict[str, Any]:
    paid = await run.call("pay", amount=amount)
    return {"paid": paid, "then": await run.call("publish", text=f"paid {amount}")}


@pytest.fixture
def h(outlast_harness: HarnessFactory) -> Harness:
    world.clear()
    made = outlast_harness(app)
    made.start_worker()
    return made


def cli(h: Harness, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """The real ``outlast`` command on the harness's schema and prefix; stdin is not a terminal."""
    return subprocess.run(
        [sys.executable, "-m", "outlast", *args],
        env=cli_env(h, **env),
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        cwd=ROOT,
        timeout=60,
    )


def cli_env(h: Harness, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTLAST_")}
    env |= {
        "OUTLAST_DATABASE_URL": h.database_url,
        "OUTLAST_REDIS_URL": h.redis_url,
        "OUTLAST_SCHEMA": h.schema,
        "OUTLAST_PREFIX": h.prefix,
        "PYTHONPATH": str(ROOT),
    }
    return env | extra


def asking(h: Harness, text: str, approvers: list[str], authenticated: bool = False) -> tuple[str, str]:
    """A run awaiting approval of publishing ``text``: (run id, the args hash a person sees)."""
    rid = h.client.enqueue("ask", {"text": text, "approvers": approvers, "authenticated": authenticated}).id
    h.wait(rid, "awaiting_approval")
    return rid, h.client.approvals(rid)[0]["args_hash"]


def decision_entry(h: Harness, run_id: str) -> dict[str, Any]:
    [entry] = [e.data for e in h.client.journal(run_id) if e.kind == "decision"]
    return entry


def event(h: Harness, run_id: str, kind: str) -> dict[str, Any]:
    [detail] = [e["detail"] for e in h.events(run_id) if e["kind"] == kind]
    return detail


# -- the client: principals ----------------------------------------------------------------------


def test_an_authenticated_principal_decides_as_itself_and_everything_names_it(h: Harness) -> None:
    rid, seen = asking(h, "<script>alert(1)</script>", ["ops"])
    with pytest.raises(DecisionRefused, match=r"bob \(groups: sec\) may not decide \(approvers: ops\)"):
        h.client.approve(rid, "op-1", principal=BOB, comment="mine", args_hash=seen)
    with pytest.raises(
        InvalidInput, match=r"with an authenticated principal \(alice\) the decider is the principal"
    ):
        h.client.approve(rid, "op-1", principal=ALICE, approver="ops", comment="typed", args_hash=seen)
    with pytest.raises(DecisionRefused, match="for other arguments"):
        h.client.approve(rid, "op-1", principal=ALICE, comment="ok", args_hash=args_hash({"text": "other"}))
    assert h.client.status(rid).state == "awaiting_approval" and world == []

    h.client.approve(rid, "op-1", principal=ALICE, comment="read it twice", args_hash=seen)
    done = h.wait(rid)
    assert done.state == "succeeded" and done.result is not None and done.result["by"] == "alice"
    assert world == [("publish", {"text": "<script>alert(1)</script>"})]

    record = {"principal": "alice", "groups": ["ops"], "how": "token", "where": "10.0.0.5"}
    [row] = h.sql(
        "SELECT decided_by, decided_by_detail, comment, decided_at FROM approvals WHERE run_id = %s", rid
    )
    assert row[:3] == ("alice", record, "read it twice")
    journaled = decision_entry(h, rid)
    assert (
        journaled["by"] == "alice" and journaled["who"] == record and journaled["comment"] == "read it twice"
    )
    assert journaled["at"] == row[3].isoformat()  # when: the database clock at the decision
    said = event(h, rid, "decision")
    assert said["who"] == record and said["by"] == "alice" and said["comment"] == "read it twice"
    assert h.client.verify(rid) is None

    shown = cli(h, "status", rid)
    assert "approved by alice: read it twice" in shown.stdout
    assert "decided by alice (ops) via token from 10.0.0.5 at " in shown.stdout, shown.stdout
    as_json = json.loads(cli(h, "status", rid, "--json").stdout)
    assert as_json["approvals"][0]["decided_by_detail"] == record
    assert '"how": "token"' in cli(h, "events", rid).stdout

    # The same decision again changes nothing; another principal's contradiction is refused.
    h.client.approve(rid, "op-1", principal=ALICE, comment="read it twice", args_hash=seen)
    with pytest.raises(DecisionRefused, match="already approved by alice"):
        h.client.reject(rid, "op-1", principal=ALICE, comment="on second thought", args_hash=seen)


def test_approvers_name_users_or_groups(h: Harness) -> None:
    by_name, seen = asking(h, "for carol", ["carol"])
    with pytest.raises(DecisionRefused, match=r"alice \(groups: ops\) may not decide \(approvers: carol\)"):
        h.client.approve(by_name, "op-1", principal=ALICE, comment="ops may not", args_hash=seen)
    carol = Principal("carol", frozenset(), "header", "10.0.0.1")
    h.client.approve(by_name, "op-1", principal=carol, comment="mine to decide", args_hash=seen)

    by_group, seen2 = asking(h, "for sec or ops", ["sec", "ops"])
    h.client.reject(by_group, "op-1", principal=BOB, comment="not now", args_hash=seen2)
    assert h.wait(by_name).state == "succeeded"
    assert h.wait(by_group).state == "failed"
    assert world == [("publish", {"text": "for carol"})]
    assert decision_entry(h, by_group)["who"] == {
        "principal": "bob",
        "groups": ["sec"],
        "how": "session",
        "where": "10.0.0.9",
    }


def test_a_program_decides_as_a_declared_name_with_its_user_and_host_beside(h: Harness) -> None:
    rid, seen = asking(h, "from code", ["ops"])
    with pytest.raises(InvalidInput, match="say who decides"):
        h.client.approve(rid, "op-1", comment="nobody", args_hash=seen)
    h.client.approve(rid, "op-1", approver="ops", comment="scripted", args_hash=seen)
    assert h.wait(rid).state == "succeeded"
    assert decision_entry(h, rid)["who"] == {**ME, "how": "client", "as": "ops"}


def test_an_authenticated_request_is_refused_to_the_cli_and_a_program_and_taken_from_a_token(
    h: Harness,
) -> None:
    rid, seen = asking(h, "signed only", ["ops"], authenticated=True)
    assert "(approvers: ops, authenticated only)" in cli(h, "status", rid).stdout
    with pytest.raises(DecisionRefused, match="authenticated decision, which the client cannot make"):
        h.client.approve(rid, "op-1", approver="ops", comment="from code", args_hash=seen)
    refused = cli(h, "approve", rid, "op-1", "--as", "ops", "--comment", "from a shell", "--args-hash", seen)
    assert refused.returncode == 1, refused.stderr
    assert refused.stderr.count("\n") == 1 and "Traceback" not in refused.stderr
    assert (
        "which the cli cannot make: decide it in the dashboard (outlast dashboard) or the API"
        in refused.stderr
    )
    rejected = cli(h, "reject", rid, "op-1", "--as", "ops", "--comment", "from a shell")
    assert rejected.returncode == 1 and "authenticated decision" in rejected.stderr
    assert h.client.status(rid).state == "awaiting_approval" and world == []

    h.client.approve(rid, "op-1", principal=ALICE, comment="signed in", args_hash=seen)
    assert h.wait(rid).state == "succeeded"
    assert world == [("publish", {"text": "signed only"})]
    [asked] = [e.data for e in h.client.journal(rid) if e.kind == "approval"]
    assert asked["authenticated"] is True  # journaled: bound on replay like the approvers


# -- the CLI ---------------------------------------------------------------------------------------


def test_the_cli_records_its_user_and_host_beside_the_as_name(h: Harness) -> None:
    rid, seen = asking(h, "from a shell", ["ops"])
    done = cli(h, "approve", rid, "op-1", "--as", "ops", "--comment", "looked", "--args-hash", seen)
    assert done.returncode == 0, done.stderr
    assert f"op-1 approved by ops (declared by {ME['principal']} on {ME['where']})" in done.stdout
    assert h.wait(rid).state == "succeeded"
    record = {**ME, "as": "ops"}
    assert decision_entry(h, rid)["who"] == record and event(h, rid, "decision")["who"] == record
    shown = cli(h, "status", rid).stdout
    assert f"decided by ops, declared by {ME['principal']} via cli from {ME['where']} at " in shown


def test_approve_and_revise_need_the_hash_seen_or_yes_i_saw_on_a_terminal(h: Harness) -> None:
    rid, seen = asking(h, "look first", ["ops"])
    for kind, extra in (("approve", []), ("revise", ["--args", '{"text": "shorter"}'])):
        bare = cli(h, kind, rid, "op-1", "--as", "ops", "--comment", "blind", *extra)
        assert bare.returncode == 2 and bare.stderr.count("\n") == 1, bare.stderr
        assert f"{kind} needs --args-hash H" in bare.stderr and "--yes-i-saw" in bare.stderr
        no_tty = cli(h, kind, rid, "op-1", "--as", "ops", "--comment", "blind", "--yes-i-saw", *extra)
        assert no_tty.returncode == 2 and "stdin is not one: pass --args-hash H" in no_tty.stderr
    both = cli(h, "approve", rid, "op-1", "--as", "ops", "--comment", "x", "--args-hash", seen, "--yes-i-saw")
    assert both.returncode == 2 and "not both" in both.stderr
    assert h.client.approvals(rid)[0]["status"] == "pending"

    said_no, out = on_a_terminal(
        h, "n", "approve", rid, "op-1", "--as", "ops", "--comment", "hm", "--yes-i-saw"
    )
    assert said_no == 1 and "not decided (you did not confirm)" in out, out
    assert (
        f"hash       {seen}" in out
        and 'arguments  {"text": "look first"}' in out
        and "action     publish" in out
    )
    assert h.client.approvals(rid)[0]["status"] == "pending"

    said_yes, out = on_a_terminal(
        h, "y", "approve", rid, "op-1", "--as", "ops", "--comment", "saw", "--yes-i-saw"
    )
    assert said_yes == 0 and "op-1 approved by ops" in out, out
    assert h.wait(rid).state == "succeeded"
    assert decision_entry(h, rid)["comment"] == "saw"


def on_a_terminal(h: Harness, answer: str, *args: str) -> tuple[int, str]:
    """Run the CLI with a pseudo-terminal as stdin and stdout; answer its question; return
    (exit code, everything it wrote)."""
    primary, secondary = os.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "outlast", *args],
        env=cli_env(h),
        stdin=secondary,
        stdout=secondary,
        stderr=secondary,
        cwd=ROOT,
    )
    os.close(secondary)
    out, answered = b"", False
    until = time.monotonic() + 60
    while time.monotonic() < until:
        ready, _, _ = select.select([primary], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(primary, 4096)
            except OSError:  # the terminal closed: the command ended
                break
            if not chunk:
                break
            out += chunk
        if not answered and b"[y/N]" in out:
            os.write(primary, answer.encode() + b"\n")
            answered = True
        if proc.poll() is not None and not ready:
            break
    os.close(primary)
    return proc.wait(10), out.decode(errors="replace").replace("\r\n", "\n")


# -- resolutions -----------------------------------------------------------------------------------


def test_a_resolution_journals_who_and_why_and_the_run_goes_on(h: Harness) -> None:
    first = h.client.enqueue("pay_then_publish", {"amount": 30}).id
    h.crash_at("after_effect", tool="pay")  # paid; its result never journaled
    h.start_worker()
    assert h.wait(first, "waiting").reason == "in_doubt"
    h.client.resolve(
        first, "op-1", executed=True, result={"paid": 30}, principal=ALICE, comment="checked the bank"
    )
    assert h.wait(first).state == "succeeded"
    assert world == [("pay", {"amount": 30}), ("publish", {"text": "paid 30"})]  # paid once
    [resolution] = [e.data for e in h.client.journal(first) if e.kind == "resolution"]
    record = {"principal": "alice", "groups": ["ops"], "how": "token", "where": "10.0.0.5"}
    assert resolution["who"] == record and resolution["comment"] == "checked the bank"
    assert event(h, first, "resolved") == {
        "op": "op-1",
        "executed": True,
        "who": record,
        "comment": "checked the bank",
    }

    second = h.client.enqueue("pay_then_publish", {"amount": 7}).id
    h.crash_at("after_effect", tool="pay")
    h.start_worker()
    h.wait(second, "waiting")
    done = cli(h, "resolve", second, "op-1", "--not-executed", "--comment", "the bank never saw it")
    assert done.returncode == 0, done.stderr
    assert f"resolved as not executed by {ME['principal']} on {ME['where']}" in done.stdout
    assert h.wait(second).state == "succeeded"
    [resolution] = [e.data for e in h.client.journal(second) if e.kind == "resolution"]
    assert resolution["who"] == ME and resolution["comment"] == "the bank never saw it"
    shown = cli(h, "status", second).stdout
    assert f"by {ME['principal']} via cli from {ME['where']}: the bank never saw it" in shown, shown


# -- users ------------------------------------------------------------------------------------------


def test_users_add_prints_the_token_once_and_keeps_only_its_hash(tmp_path: Path) -> None:
    path = tmp_path / "users.toml"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OUTLAST_")} | {"PYTHONPATH": str(ROOT)}

    def outlast(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "outlast", *args],
            env=env | extra,
            capture_output=True,
            text=True,
            timeout=60,
        )

    added = outlast("users", "add", "alice", "--group", "ops", "--group", "finance", "--users", str(path))
    assert added.returncode == 0, added.stderr
    token = added.stdout.splitlines()[1]
    assert "alice (finance, ops) in " in added.stdout and "shown once" in added.stdout
    assert "not stored" in added.stdout
    assert token not in path.read_text() and hash_token(token) in path.read_text()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    found = Users.load(path).by_token(token, where="10.0.0.5")
    assert found == Principal("alice", frozenset({"ops", "finance"}), "token", "10.0.0.5")

    by_env = outlast("users", "add", "bob", OUTLAST_USERS=str(path))  # the file from OUTLAST_USERS
    assert by_env.returncode == 0 and "bob (no groups)" in by_env.stdout, by_env.stderr
    bob = Users.load(path).by_token(by_env.stdout.splitlines()[1])
    assert bob is not None and bob.name == "bob"
    assert Users.load(path).by_token(token) is not None  # alice is kept

    nowhere = outlast("users", "add", "carol")
    assert nowhere.returncode == 2 and "--users PATH or OUTLAST_USERS" in nowhere.stderr
    bad = outlast("users", "add", "<script>", "--users", str(path))
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "a user name must be" in bad.stderr
    assert "Traceback" not in nowhere.stderr + bad.stderr
