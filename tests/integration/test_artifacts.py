"""Artifacts, on real Postgres and Redis with real worker processes: a workflow saves one (a
journaled crossing) and a tool saves one (keyed by its operation); the worker is killed after the
tool saved its artifact and before its result was journaled, and another resumes the run: the
tool is dispatched again, and nothing is saved twice (the ``artifacts`` and ``payloads`` rows
counted). They are listed and downloaded through the client, the CLI and the dashboard (an
operator may download, a viewer may not); pruned with their run unless kept, and a kept one is
removed by ``outlast artifacts RUN --delete``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import time

import pytest
from starlette.testclient import TestClient

from outlast import AsyncClient, Client, _bundle as bundle
from outlast.dashboard import create_app
from outlast.identity import add_user
from outlast.testing import HarnessFactory
from outlast.testing.worker import run_blocking
from tests.apps import artifacts
from tests.apps.artifacts import CHART
from tests.conftest import World
from tests.dashboard import ROLES

APP = "tests.apps.artifacts:app"


def rows(world: World, run_id: str) -> tuple[list[tuple[str, str, str]], int]:
    found = world.sql("SELECT op_id, name, sha256 FROM artifacts WHERE run_id = %s ORDER BY op_id", run_id)
    ((payloads,),) = world.sql("SELECT count(*) FROM payloads WHERE run_id = %s", run_id)
    return [tuple(r) for r in found], int(payloads)  # type: ignore[misc]


def test_a_workflow_and_a_tool_save_artifacts_once_across_a_kill_and_all_read_them(world: World) -> None:
    users = world.tmp / "users.toml"
    users.write_text(ROLES)
    olga, bob = add_user(users, "olga", ["oncall"]), add_user(users, "bob", ["viewers"])
    settings = world.settings(users=str(users))
    tally = world.tmp / "tally.txt"
    with Client(settings=settings) as client:
        run_id = client.enqueue("report", {"tally": str(tally)}).id
        killed = world.worker(APP, OUTLAST_FAILPOINTS="after_effect:render")
        assert killed.wait(60) != 0  # killed itself after the tool saved its artifact
        before, _ = rows(world, run_id)
        assert [(op, name) for op, name, _ in before] == [("op-1", "summary.txt"), ("op-2", "chart.png")]
        world.worker(APP)
        run = client.wait(run_id, timeout=90)
        assert run.state == "succeeded", run.reason
        assert tally.read_text().count("dispatched") == 2  # the tool was dispatched again...
        after, payloads = rows(world, run_id)
        assert after[:2] == before and len(after) == 3 and payloads == 3  # ...and nothing saved twice
        assert run.result["summary"] == before[0][2]  # the replay's save is the journal's
        assert run.result == {"summary": before[0][2], "chart": len(CHART), "table": "text/csv"}

        listed = client.artifacts(run_id)
        assert [(a["name"], a["size"]) for a in listed][1] == ("chart.png", len(CHART))
        assert listed[1]["media_type"] == "image/png" and not listed[1]["keep"]
        assert client.artifact(run_id, "chart.png") == CHART
        assert client.artifact(run_id, "table.csv") == b"a,b\n1,2\n"

    shown = world.cli("artifacts", run_id)
    assert shown.returncode == 0, shown.stderr
    assert [ln.split()[0] for ln in shown.stdout.splitlines()] == ["summary.txt", "chart.png", "table.csv"]
    got = world.tmp / "chart.png"
    assert world.cli("artifacts", run_id, "--get", "chart.png", "-o", str(got)).returncode == 0
    assert got.read_bytes() == CHART
    as_json = json.loads(world.cli("status", run_id, "--json").stdout)
    assert [a["name"] for a in as_json["artifacts"]] == ["summary.txt", "chart.png", "table.csv"]

    with TestClient(create_app(settings), base_url="http://127.0.0.1") as tc:
        page = tc.get(f"/runs/{run_id}", headers={"Authorization": f"Bearer {olga}"})
        assert page.status_code == 200 and 'id="artifacts"' in page.text and "chart.png" in page.text
        url = f"/api/runs/{run_id}/artifact?name=chart.png"
        down = tc.get(url, headers={"Authorization": f"Bearer {olga}"})
        assert down.status_code == 200 and down.content == CHART
        assert down.headers["content-type"] == "image/png"
        refused = tc.get(url, headers={"Authorization": f"Bearer {bob}"})
        assert refused.status_code == 403 and "operator" in refused.json()["error"]
        missing = tc.get(
            f"/api/runs/{run_id}/artifact?name=nope", headers={"Authorization": f"Bearer {olga}"}
        )
        assert missing.status_code == 404


def test_artifacts_go_with_their_run_unless_kept_and_a_kept_one_is_deleted_by_hand(world: World) -> None:
    tally = world.tmp / "tally.txt"
    with Client(settings=world.settings()) as client:
        plain = client.enqueue("report", {"tally": str(tally)}).id
        kept = client.enqueue("report", {"tally": str(tally), "keep": True}).id
        world.worker(APP)
        for rid in (plain, kept):
            assert client.wait(rid, timeout=60).state == "succeeded"
        time.sleep(1.1)
        ((going,),) = world.sql("SELECT count(*) FROM artifacts WHERE NOT keep")
        assert going > 0
        counted = world.cli("prune", "--finished-before", "1s", "--dry-run")
        assert f"{going} artifacts (dry run" in counted.stdout, counted.stdout + counted.stderr
        pruned = world.cli("prune", "--finished-before", "1s")
        assert pruned.returncode == 0, pruned.stderr + pruned.stdout
        assert f"{going} artifacts" in pruned.stdout, pruned.stdout

        world.sweep_payloads()
        assert rows(world, plain) == ([], 0)  # pruned with their run, bytes swept
        (only,) = rows(world, kept)[0]
        assert only[1] == "summary.txt" and rows(world, kept)[1] == 1  # the kept one, and its bytes
        summary = client.artifact(kept, "summary.txt")
        assert hashlib.sha256(summary).hexdigest() == only[2] and summary.startswith(b"summary ")

    gone = world.cli("artifacts", kept, "--delete", "summary.txt")
    assert gone.returncode == 0 and "deleted 1" in gone.stdout, gone.stderr
    world.sweep_payloads()
    assert rows(world, kept) == ([], 0)


def test_the_debug_bundle_lists_the_artifacts_and_carries_the_small_ones(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    tally = world.tmp / "tally.txt"
    with Client(settings=world.settings()) as client:
        run_id = client.enqueue("report", {"tally": str(tally)}).id
        world.worker(APP)
        assert client.wait(run_id, timeout=60).state == "succeeded"
    out = world.tmp / "bundle"
    done = world.cli("export", run_id, "-o", str(out))
    assert done.returncode == 0, done.stderr
    lines = [json.loads(ln) for ln in (out / "artifacts.jsonl").read_text().splitlines()]
    assert [a["name"] for a in lines] == ["summary.txt", "chart.png", "table.csv"]
    assert base64.b64decode(lines[1]["base64"]) == CHART  # about 10 KB: carried
    assert all(a["size"] <= bundle.BUNDLED_BYTES for a in lines)

    monkeypatch.setattr(bundle, "BUNDLED_BYTES", 5000)  # the chart is now too large to carry

    async def texts() -> dict[str, str]:
        async with AsyncClient(settings=world.settings()) as c:
            return await bundle.contents(c, run_id)

    small = [json.loads(ln) for ln in run_blocking(texts)["artifacts.jsonl"].splitlines()]
    assert "base64" not in small[1] and small[1]["size"] == len(CHART)  # listed, not carried
    assert "base64" in small[0] and "base64" in small[2]


def test_an_async_tool_awaits_its_save_and_one_left_alone_is_done_before_its_result(
    outlast_harness: HarnessFactory,
) -> None:
    h = outlast_harness(artifacts.app)
    h.start_worker()
    rid = h.client.enqueue("snapshot", {"text": "hello"}).id
    run = h.wait(rid, "succeeded")
    assert run.result == hashlib.sha256(b"hello").hexdigest()
    listed = {a["name"]: a for a in h.client.artifacts(rid)}
    assert set(listed) == {"snap.txt", "later.txt"} and listed["snap.txt"]["media_type"] == "text/plain"
    assert h.client.artifact(rid, "later.txt") == b"not awaited: finished before the result"
