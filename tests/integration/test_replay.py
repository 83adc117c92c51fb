"""Offline replay from real runs: runs made by a real worker on real Postgres and Redis are
exported as bundles (or read back through the client) and replayed against three versions of
the code: the one that made them, the same crossings written otherwise (must agree), and one that
adds a fee to the charge (must be caught at the charge's crossing, with both arguments hashes)."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

from outlast import AsyncClient, Client
from outlast._bundle import export
from outlast._journal import args_hash
from outlast._replay import Verdict, replay_workflow
from outlast.testing import Harness, HarnessFactory, assert_replays, replay_bundle
from tests.apps import orders
from tests.conftest import World, wait_for

KEY = "r9Fh2Kq-Xm5Tz0Lw7Bc3Nv8Jp1Gs6Dy4E"


def _export(h: Harness, run_id: str, out: Path) -> Path:
    async def go() -> None:
        async with AsyncClient(settings=h.settings) as c:
            await export(c, run_id, out)

    asyncio.run(go())
    return out


def _made(h: Harness, qty: int, *states: str) -> str:
    rid = h.client.enqueue("order", {"item": "book", "qty": qty, "note": "gift wrap, please"}).id
    h.wait(rid, *states)
    return rid


def test_a_finished_run_replays_against_the_same_code_and_a_changed_one_is_caught(
    outlast_harness: HarnessFactory, tmp_path: Path
) -> None:
    h = outlast_harness(orders.app, secret_key=KEY)
    h.start_worker()
    rid = _made(h, 2, "succeeded")
    out = _export(h, rid, tmp_path / "bundle")

    for app in (orders.app, orders.same):
        report = assert_replays(out, app, secret_key=KEY)
        assert report.verdict == Verdict.AGREES and "as journaled" in report.where, report

    report = replay_bundle(out, orders.changed, secret_key=KEY)
    assert report.verdict == Verdict.DIVERGES
    split = report.divergence
    assert split is not None
    assert (split.crossing, split.operation) == (2, "op-2")  # quote, a read: #1 its result alone
    assert split.journal == 'charge({"amount":25.0})'
    assert split.code == 'charge({"amount":26.5})'
    assert split.journal_hash == args_hash({"amount": 25.0})
    assert split.code_hash == args_hash({"amount": 26.5})
    with pytest.raises(AssertionError, match=r"first divergence at op-2, crossing 2 of"):
        assert_replays(out, orders.changed, secret_key=KEY)

    # A finished run whose code would ask one more crossing, or end otherwise, diverges too.
    shorter = json.loads((out / "last_state.json").read_text())
    shorter["run"]["result"]["parcel"] = "parcel-elsewhere"
    moved = tmp_path / "moved"
    shutil.copytree(out, moved)
    (moved / "last_state.json").write_text(json.dumps(shorter))
    ended = replay_bundle(moved, orders.app, secret_key=KEY)
    assert ended.verdict == Verdict.DIVERGES and ended.divergence is not None
    assert "parcel-elsewhere" in ended.divergence.journal and "parcel-book-2" in ended.divergence.code


def test_an_unfinished_run_agrees_up_to_its_journal_end_and_nothing_runs(
    outlast_harness: HarnessFactory, tmp_path: Path
) -> None:
    h = outlast_harness(orders.app, secret_key=KEY)
    h.start_worker()
    rid = _made(h, 8, "awaiting_approval")  # charged, then waits for ops
    out = _export(h, rid, tmp_path / "bundle")

    def refuse(**kw: object) -> None:
        raise AssertionError("an offline replay dispatched a tool")

    with h.replace_tool("ship", refuse), h.replace_tool("charge", refuse), h.replace_tool("quote", refuse):
        report = assert_replays(out, orders.same, secret_key=KEY)
    assert "journal end at op-3" in report.where and "approval op-3 of ship" in report.where, report
    assert replay_bundle(out, orders.changed, secret_key=KEY).verdict == Verdict.DIVERGES

    # An edited bundle is not replayed as if it were the run's journal.
    text = (out / "journal.jsonl").read_text()
    assert '"ok":"receipt-100"' in text.replace(" ", "")
    (out / "journal.jsonl").write_text(text.replace("receipt-100", "receipt-1"))
    assert replay_bundle(out, orders.app, secret_key=KEY).verdict == Verdict.ALTERED


def test_a_gap_a_crash_left_is_the_journal_end_and_no_read_is_redone(
    outlast_harness: HarnessFactory, tmp_path: Path
) -> None:
    """A worker would resolve a gap a crash left (redo, dispatch again or declare it in doubt); an
    offline replay stops there, and nothing runs (a read journals no intention: its gap is none)."""
    h = outlast_harness(orders.app, secret_key=KEY)
    rid = h.client.enqueue("order", {"item": "book", "qty": 1}).id
    h.crash_at("after_intention", "charge")  # the charge's intention journaled, its result not
    out = _export(h, rid, tmp_path / "bundle")
    asked: list[str] = []
    h.replace_tool("quote", lambda item: asked.append(item) or 12.5)
    h.replace_tool("charge", lambda amount: asked.append(f"charge {amount}") or "receipt")
    report = assert_replays(out, orders.app, secret_key=KEY)
    assert report.where.startswith("journal end at op-2: next the code asks charge(")
    assert report.where.endswith("journaled with no result (a gap to resolve) (live)")
    assert asked == []


def test_every_unfinished_run_of_a_workflow_is_replayed_read_only(outlast_harness: HarnessFactory) -> None:
    h = outlast_harness(orders.app, secret_key=KEY)
    h.start_worker()
    waiting = [_made(h, 6 + i, "awaiting_approval") for i in range(3)]
    done = _made(h, 1, "succeeded")
    world = (
        "SELECT (SELECT count(*) FROM journal), (SELECT count(*) FROM events), "
        "(SELECT max(updated_at) FROM runs)"
    )
    before = h.sql(world)

    async def replayed(app: object) -> list[str]:
        async with AsyncClient(settings=h.settings) as c:
            code = orders.changed if app == "changed" else orders.same
            reports = await replay_workflow(c, code, "order", secret_key=KEY)
        return [f"{r.run_id}:{r.verdict}" for r in reports]

    assert asyncio.run(replayed("same")) == [f"{r}:agrees" for r in waiting]  # not the finished one
    assert asyncio.run(replayed("changed")) == [f"{r}:diverges" for r in waiting]
    assert h.sql(world) == before
    assert h.client.status(done).state == "succeeded"


def test_the_replay_command_before_a_deploy(world: World) -> None:
    """The operator's check, in real processes: a bundle with no services, then every unfinished
    run of the workflow from Postgres; exit 1 and a per-run table when the code diverges."""
    world.worker("tests.apps.orders:app", OUTLAST_SECRET_KEY=KEY)
    with Client(settings=world.settings(), app=orders.app) as c:
        waiting = [c.enqueue("order", {"item": "book", "qty": 7 + i}).id for i in range(2)]
        done = c.enqueue("order", {"item": "book", "qty": 2, "note": "hi"}).id
        assert c.wait(done, timeout=30).state == "succeeded"
        wait_for(lambda: all(c.status(r).state == "awaiting_approval" for r in waiting), what="approvals")
    out = world.tmp / "bundle"
    assert world.cli("export", done, "-o", str(out)).returncode == 0

    nowhere = {"OUTLAST_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none", "OUTLAST_SECRET_KEY": KEY}
    same = world.cli("replay", str(out), "tests.apps.orders:same", **nowhere)
    assert same.returncode == 0, same.stderr
    assert f"run {done} (order, succeeded, 8 entries): agrees" in same.stdout
    changed = world.cli("replay", str(out), "tests.apps.orders:changed", **nowhere)
    assert changed.returncode == 1, changed.stderr
    assert "first divergence at op-2, crossing 2 of the journal" in changed.stdout
    assert (
        'journal has  charge({"amount":25.0})  [arguments hash ' + args_hash({"amount": 25.0})[:16]
        in changed.stdout
    )
    assert 'code asks    charge({"amount":26.5})' in changed.stdout

    ok = world.cli("replay", "--workflow", "order", "tests.apps.orders:same", OUTLAST_SECRET_KEY=KEY)
    assert ok.returncode == 0, ok.stderr
    assert all(f"{r}  awaiting_approval" in ok.stdout for r in waiting) and done not in ok.stdout
    assert "2 runs replayed: 2 agree, 0 do not" in ok.stdout
    bad = world.cli("replay", "--workflow", "order", "tests.apps.orders:changed", OUTLAST_SECRET_KEY=KEY)
    assert bad.returncode == 1 and "2 runs replayed: 0 agree, 2 do not" in bad.stdout, bad.stdout + bad.stderr
    finished = world.cli(
        "replay",
        "--workflow",
        "order",
        "--state",
        "succeeded",
        "--since",
        "1h",
        "tests.apps.orders:changed",
        OUTLAST_SECRET_KEY=KEY,
    )
    assert finished.returncode == 1 and f"{done}  succeeded" in finished.stdout

    shown = world.cli("status", done, "--op", "op-3")
    assert shown.returncode == 0 and "capture" in shown.stdout and "Bearer [secret]" in shown.stdout
    assert orders.KEY not in shown.stdout
    mistake = world.cli("replay", str(out), OUTLAST_SECRET_KEY=KEY)
    assert mistake.returncode == 2 and "BUNDLE MODULE:APP" in mistake.stderr
