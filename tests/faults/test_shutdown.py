"""Tools that never return. SIGTERM with a run blocked in a hung sync tool: the worker exits within
its grace period (+5 s), the run is handed over, and the worker that takes it finds the hung call
with an intention and no result: a plain tool, so in doubt, exactly that operation, until a person
resolves it. And a tool declared with ``timeout=1.0`` that hangs: the run does not hang with it (a
plain tool's timed-out call ends in doubt; a read tool's is an error the workflow sees)."""

from __future__ import annotations

import signal
import subprocess
import time

import pytest

from tests.apps import faults as faults_app
from tests.conftest import wait_for
from tests.faults import FaultWorld, check_every_run_once, enqueue_many, in_doubt_ops

pytestmark = pytest.mark.crash

GRACE = 1.0


def state(fw: FaultWorld, rid: str) -> str:
    found = fw.sql("SELECT coalesce(state || '/' || reason, state) FROM runs WHERE id = %s", rid)
    return str(found[0][0])


@pytest.mark.timeout(180)
def test_sigterm_with_a_run_in_a_hung_sync_tool(fw: FaultWorld) -> None:
    a = fw.start("stop-a", "--grace", f"{GRACE:g}", OUTLAST_GRACE=f"{GRACE:g}")
    rid = enqueue_many(fw, "stuck", [{"tool": "hang"}])[0]
    wait_for(lambda: fw.effects()[(rid, "op-2")] == 1, 30, 0.05, "the run to enter the hung tool")
    token = fw.sql("SELECT fencing_token FROM runs WHERE id = %s", rid)[0][0]
    fw.start("stop-b", "--grace", f"{GRACE:g}", OUTLAST_GRACE=f"{GRACE:g}")
    began = time.monotonic()
    a.send_signal(signal.SIGTERM)
    problems = []
    try:
        rc = a.wait(GRACE + 5)
        print(f"\nworker exited {time.monotonic() - began:.1f}s after SIGTERM (grace {GRACE:g}s), code {rc}")
    except subprocess.TimeoutExpired:
        problems.append(f"the worker had not exited {GRACE + 5:g}s after SIGTERM (grace {GRACE:g}s)")
        print(f"\nworker still alive {time.monotonic() - began:.1f}s after SIGTERM")
    try:
        wait_for(lambda: state(fw, rid) == "waiting/in_doubt", 30, 0.1, "the run to wait in doubt")
        taken = fw.sql("SELECT fencing_token FROM runs WHERE id = %s", rid)[0][0]
        print(f"run in doubt {time.monotonic() - began:.1f}s after SIGTERM; fencing token {token} -> {taken}")
        if taken <= token:
            problems.append(f"no other worker took the run (fencing token still {taken})")
        doubted = in_doubt_ops(fw).get(rid)
        if doubted != [("op-2", "hang")]:
            problems.append(f"in doubt on {doubted}, not exactly op-2 (hang)")
    except AssertionError as exc:
        problems.append(f"{exc}: the run is {state(fw, rid)}")
    assert not problems, "\n".join(problems) + "\n" + fw.log_tail()
    # A person looks: the row is there, the hung call happened; the run goes on without it.
    done = fw.cli("resolve", rid, "op-2", "--executed", "--result", '{"resolved": "by a person"}')
    assert done.returncode == 0, done.stdout + done.stderr
    fw.wait_settled([rid], timeout=30, what="the resolved run to finish")
    check_every_run_once(fw, [rid], ops=3)


@pytest.mark.timeout(120)
def test_a_tool_that_hangs_past_its_timeout(fw: FaultWorld) -> None:
    fw.start("limit-a")
    plain = enqueue_many(fw, "stuck", [{"tool": "hang_limited"}])[0]
    read = enqueue_many(fw, "stuck_read", [{}])[0]
    problems = []
    if not faults_app.TIMEOUT_SUPPORTED:
        problems.append("@app.tool does not accept timeout=: the tools were registered without one")
    try:
        took = fw.wait_settled(
            [plain, read], timeout=30, what="both runs to settle past their tool's timeout"
        )
        print(f"\nboth runs settled after {took:.1f}s (tool timeout 1 s)")
    except AssertionError as exc:
        problems.append(str(exc))
        assert not problems, "\n".join(problems)
    effects = fw.effects()
    if state(fw, plain) != "waiting/in_doubt":
        problems.append(f"the plain tool's run is {state(fw, plain)}, not waiting in doubt")
    elif in_doubt_ops(fw).get(plain) != [("op-2", "hang_limited")]:
        problems.append(
            f"the plain run is in doubt on {in_doubt_ops(fw).get(plain)}, not op-2 (hang_limited)"
        )
    plain_effects = [effects[(plain, f"op-{k}")] for k in (1, 2, 3)]
    if plain_effects != [1, 1, 0]:
        problems.append(f"plain run: effects of op-1..3 are {plain_effects}, want [1, 1, 0]")
    run = fw.sql("SELECT state, result::text FROM runs WHERE id = %s", read)[0]
    print(f"read run: {run}")
    if run[0] != "succeeded" or '"error"' not in str(run[1]):
        problems.append(f"the read tool's timeout is not an error the workflow caught: {run}")
    read_effects = [effects[(read, f"op-{k}")] for k in (1, 2, 3)]
    if read_effects != [1, 0, 1]:
        problems.append(f"read run: effects of op-1..3 are {read_effects}, want [1, 0, 1]")
    if "Traceback" in fw.logs():
        problems.append(f"Traceback in the worker logs: {fw.log_lines('Traceback', 2)}")
    assert not problems, "\n".join(problems)
