"""Bad input to the real `outlast` command against the real servers: one line on stderr, a
non-zero exit, no traceback, and nothing written (no run row, no Redis key)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from outlast import App
from tests.conftest import ROOT, World, wait_for

# Served by a real worker in the last test (`tests.integration.test_bad_input_cli:app`).
app = App()


@app.tool("nul", effect="read")
def nul() -> str:
    return "a\x00b"


@app.workflow("tool_returns_nul")
async def tool_returns_nul(run: Any) -> Any:
    return await run.call("nul")


@app.workflow("returns_nul")
async def returns_nul(run: Any) -> dict[str, str]:
    return {"text": "a\x00b"}


def written(world: World) -> tuple[int, list[str]]:
    """What the test's corner of the servers holds: run rows and Redis keys."""
    (count,) = world.sql("SELECT count(*) FROM runs")[0]
    return count, list(world.redis().scan_iter(f"{world.prefix}:*"))


def assert_one_line(p: subprocess.CompletedProcess[str], code: int = 2) -> str:
    assert p.returncode == code, (p.returncode, p.stderr)
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("outlast: error: "), p.stderr
    assert "Traceback" not in p.stderr + p.stdout
    return lines[0]


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        (["runs", "--limit", "-1"], {}, "--limit"),
        (["enqueue", "echo", "--deadline", "1e300"], {}, "deadline must be"),
        (["enqueue", "echo", "--deadline", "nan"], {}, "deadline must be"),
        (["enqueue", "echo", "--input", "null"], {}, "the input is null"),
        (["enqueue", "echo", "--input", '{"a": "x\\u0000y"}'], {}, "NUL"),
        (["enqueue", "echo", "--input", '{"a": ' + "[" * 50_000 + "]" * 50_000 + "}"], {}, "deeper than 200"),
        (["enqueue", "echo", "--input", '{"a": NaN}'], {}, "NaN or infinity"),
        (["enqueue", "echo", "--queue", "a b"], {}, "the queue must be"),
        (["enqueue", "echo"], {"OUTLAST_LEASE_TTL": "1e12"}, "OUTLAST_LEASE_TTL"),
        (["enqueue", "echo"], {"OUTLAST_SCHEMA": "x -c statement_timeout=1"}, "OUTLAST_SCHEMA"),
        (
            ["enqueue", "echo"],
            {"OUTLAST_DATABASE_URL": "postgresql://u:secret@[::1/x"},
            "OUTLAST_DATABASE_URL",
        ),
        (["worker", "tests.apps.basic:app", "-c", "0"], {}, "--concurrency"),
        (["worker", "tests.apps.basic:app", "--max-attempts", "0"], {}, "--max-attempts"),
        (["worker", "tests.apps.basic:app"], {"OUTLAST_LEASE_TTL": "nan"}, "OUTLAST_LEASE_TTL"),
    ],
    ids=lambda v: str(v)[:40],
)
def test_bad_input_is_one_line_and_writes_nothing(
    world: World, args: list[str], env: dict[str, str], expected: str
) -> None:
    line = assert_one_line(world.cli(*args, **env))
    assert expected in line and "secret" not in line
    assert written(world) == (0, [])


def test_large_input_comes_from_a_file_or_stdin_and_is_bounded(world: World) -> None:
    big = world.tmp / "big.json"
    big.write_text(json.dumps({"rows": ["x" * 100] * 50}, indent=2))
    # past OUTLAST_MAX_PAYLOAD an input is held by reference; past OUTLAST_MAX_REFERENCED, refused
    over = world.cli(
        "enqueue", "echo", "--input-file", str(big), OUTLAST_MAX_PAYLOAD="2048", OUTLAST_MAX_REFERENCED="2048"
    )
    assert "over the limit of 2048 (OUTLAST_MAX_REFERENCED)" in assert_one_line(over)
    assert written(world) == (0, [])

    p = world.cli("enqueue", "echo", "--input-file", str(big), "--run-id", "from-file")
    assert p.returncode == 0, p.stderr
    stdin = subprocess.run(
        [sys.executable, "-m", "outlast", "enqueue", "echo", "--input", "-", "--run-id", "from-stdin"],
        input='{"a": 1}',
        env=world.env(),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert stdin.returncode == 0, stdin.stderr
    rows = dict(world.sql("SELECT id, input FROM runs"))
    assert rows == {"from-file": {"rows": ["x" * 100] * 50}, "from-stdin": {"a": 1}}


def test_a_nul_from_a_tool_or_a_workflow_fails_the_run_once_with_the_reason(world: World) -> None:
    spec = "tests.integration.test_bad_input_cli:app"
    for wf in ("tool_returns_nul", "returns_nul"):
        assert world.cli("enqueue", wf, "--run-id", wf).returncode == 0
    world.worker(spec, OUTLAST_MAX_ATTEMPTS="2")

    def final() -> list[tuple[Any, ...]]:
        rows = world.sql("SELECT id, state, reason, attempts FROM runs WHERE finished_at IS NOT NULL")
        return rows if len(rows) == 2 else []

    runs = {r[0]: r[1:] for r in wait_for(final, what="both runs to finish")}
    for wf, (state, reason, attempts) in runs.items():
        assert state == "failed", (wf, reason)
        assert "NUL" in reason and attempts == 1, (wf, reason, attempts)
