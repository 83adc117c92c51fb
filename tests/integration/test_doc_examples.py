"""Every Python block of the docs runs, against real Postgres and Redis.

Each page's blocks run in order in one namespace (a block may use what an earlier one defined), in
a schema and key prefix of the test's own: the ``OUTLAST_*`` variables point at them, so that
``Client.from_env()`` in a block finds them. A ``test_*`` function a page defines (the testing
page's) is then called, with the ``outlast_harness`` fixture. Markers, an HTML comment on the line
before a block (see docs/about.md):

- ``<!-- test: worker -->``: start a worker serving the page's ``app`` (in this process) first;
- ``<!-- test: skip REASON -->``: do not run the block (each skip is reported with its reason).

The first app of the README and of Getting started (``examples/hello.py``) runs as its readers run
it: a worker process, then ``python -m examples.hello``. The web dashboard's walkthrough runs its
commands as written (but for the install and ``outlast dev``: the test's servers stand in for the
embedded ones), and its user approves through the dashboard's API, as the page's button does.
"""

from __future__ import annotations

import inspect
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2 as httpx
import psycopg
import pytest

from examples import research_report
from outlast import App, Client
from outlast.testing.worker import InProcessWorker
from tests.conftest import ROOT, World, wait_for
from tests.dashboard import dashboard_process

DOCS = ROOT / "docs"
BLOCK = re.compile(r"^(?:<!-- test: (?P<marker>[^>]*?) -->\n)?```python\n(?P<code>.*?)^```", re.M | re.S)


@dataclass
class Block:
    page: Path
    line: int
    code: str
    marker: str


def blocks(page: Path) -> list[Block]:
    text = page.read_text()
    return [
        Block(page, text.count("\n", 0, m.start("code")) + 1, m["code"], m["marker"] or "")
        for m in BLOCK.finditer(text)
    ]


PAGES = [p for p in sorted(DOCS.rglob("*.md")) if blocks(p)]


@pytest.fixture
def page_env(world: World, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    for name, value in world.env().items():
        if name.startswith("OUTLAST_"):
            monkeypatch.setenv(name, value)
    monkeypatch.chdir(ROOT)
    yield world


def run_page(page: Path, world: World, harness: Any) -> list[str]:
    """Run the page's blocks; return the skips, each with its reason."""
    ns: dict[str, Any] = {"__name__": f"docs_{page.stem.replace('-', '_')}"}
    workers: list[InProcessWorker] = []
    skipped = []
    try:
        for block in blocks(page):
            where = f"{page.relative_to(ROOT) if page.is_relative_to(ROOT) else page}:{block.line}"
            if block.marker.startswith("skip"):
                reason = block.marker.removeprefix("skip").strip()
                assert reason, f"{where}: a skip must say why"
                skipped.append(f"{where}: {reason}")
                continue
            if block.marker == "worker":
                assert isinstance(ns.get("app"), App), f"{where}: no app for the worker"
                w = InProcessWorker(ns["app"], world.settings(), ["default"])
                w.start()
                workers.append(w)
            else:
                assert block.marker == "", f"{where}: unknown marker {block.marker!r}"
            # as a reader runs it: without this module's `from __future__ import annotations` (a
            # pydantic model of the page could not resolve its postponed annotations)
            exec(compile(block.code, where, "exec", dont_inherit=True), ns)
        for name, fn in list(ns.items()):
            if name.startswith("test_") and inspect.isfunction(fn):
                wants = inspect.signature(fn).parameters
                fn(**({"outlast_harness": harness} if "outlast_harness" in wants else {}))
    finally:
        for w in workers:
            w.stop()
        for value in ns.values():
            if isinstance(value, Client) and not value._loop.is_closed():  # not closed by its block
                value.close()
    return skipped


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(DOCS)))
def test_page_examples_run(page: Path, page_env: World, outlast_harness: Any) -> None:
    skipped = run_page(page, page_env, outlast_harness)
    assert len(skipped) <= 2, f"too many skipped blocks on one page: {skipped}"
    for reason in skipped:
        print(f"skipped {reason}")


def test_the_first_app_runs_as_written(world: World) -> None:
    """README and Getting started show examples/hello.py as it is; run it as they say."""
    example = (ROOT / "examples" / "hello.py").read_text()
    for page in (ROOT / "README.md", DOCS / "getting-started.md"):
        assert f"```python\n{example}```" in page.read_text(), f"{page} does not show examples/hello.py"
    world.worker("examples.hello:app")
    done = subprocess.run(
        [sys.executable, "-m", "examples.hello"],
        env=world.env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stdout + done.stderr + world.logs()
    assert "'greeting': 'hello, ada (operation " in done.stdout and ":op-1)'" in done.stdout
    assert world.sql("SELECT workflow, state FROM runs") == [("hello", "succeeded")]


def test_a_block_that_fails_fails_its_page(tmp_path: Path, page_env: World, outlast_harness: Any) -> None:
    page = tmp_path / "page.md"
    page.write_text("```python\nx = 1\n```\n\n```python\nassert x == 2, 'x is 1'\n```\n")
    with pytest.raises(AssertionError, match="x is 1"):
        run_page(page, page_env, outlast_harness)
    page.write_text("<!-- test: skip -->\n```python\nx = 1\n```\n")
    with pytest.raises(AssertionError, match="must say why"):
        run_page(page, page_env, outlast_harness)


def walkthrough(page: Path) -> list[list[str]]:
    """The ``outlast ...`` commands of the page's first bash block that adds a user, in order."""
    blocks = re.findall(r"^```bash\n(.*?)^```", page.read_text(), re.M | re.S)
    block = next(b for b in blocks if "users add" in b)
    found = []
    for line in block.splitlines():
        words = shlex.split(line, comments=True)
        while words and words[-1] == "&":
            words.pop()
        if words[:1] == ["outlast"] and words[1:2] != ["dev"]:
            found.append(words[1:])
    return found


def test_the_dashboard_walkthrough_approves_as_written(world: World) -> None:
    """web-dashboard.md: the user its ``outlast users add`` line makes may approve the research
    report's ``publish`` (a user of group ``editor`` alone is refused with 403: no approver role)."""
    commands = walkthrough(DOCS / "web-dashboard.md")
    assert [c[0] for c in commands] == ["migrate", "users", "worker", "dashboard", "enqueue"], commands
    migrate, add, worker, dashboard, enqueue = commands
    assert worker == ["worker", "examples.research_report:app"] and dashboard == ["dashboard"]
    try:
        assert world.cli(*migrate).returncode == 0
        added = subprocess.run(
            [sys.executable, "-m", "outlast", *add],
            env=world.env(),
            cwd=world.tmp,  # users.toml lands here, where the reader is
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert added.returncode == 0, added.stderr
        token = added.stdout.splitlines()[1].strip()
        users = world.tmp / "users.toml"
        world.worker(*worker[1:], OUTLAST_USERS=str(users))
        base = dashboard_process(world, OUTLAST_USERS=str(users))
        queued = world.cli(*enqueue)
        assert queued.returncode == 0, queued.stderr
        run_id = queued.stdout.split()[1]
        bearer = {"Authorization": f"Bearer {token}"}

        def asked() -> dict[str, str] | None:
            inbox = httpx.get(f"{base}/api/approvals", headers=bearer, timeout=10).json()
            return next((a for a in inbox if a["run_id"] == run_id), None)

        ask = wait_for(asked, 30, what="the publish approval")
        body = {"decision": "approve", "comment": "Sources checked.", "args_hash": ask["args_hash"]}
        url = f"{base}/api/approvals/{run_id}/{ask['op_id']}"
        done = httpx.post(url, json=body, headers=bearer, timeout=30)
        assert done.status_code == 200, done.text
        with Client(settings=world.settings()) as c:
            assert c.wait(run_id, timeout=60).state == "succeeded", world.logs()
    finally:
        world.stop_all()
        with psycopg.connect(world.database_url, autocommit=True) as conn:
            shop = research_report.tables_schema(world.schema)
            conn.execute(f'DROP SCHEMA IF EXISTS "{shop}" CASCADE'.encode())
