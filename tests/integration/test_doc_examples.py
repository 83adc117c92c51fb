"""Every Python block of the docs runs, against real Postgres and Redis.

Each page's blocks run in order in one namespace (a block may use what an earlier one defined), in
a schema and key prefix of the test's own: the ``OUTLAST_*`` variables point at them, so that
``Client.from_env()`` in a block finds them. A ``test_*`` function a page defines (the testing
page's) is then called, with the ``outlast_harness`` fixture. Markers, an HTML comment on the line
before a block (see docs/about.md):

- ``<!-- test: worker -->``: start a worker serving the page's ``app`` (in this process) first;
- ``<!-- test: skip REASON -->``: do not run the block (each skip is reported with its reason).

The examples of ``examples/`` run as their pages and docstrings say, each in a process of its own
as a reader starts it (the test's servers stand in for the embedded ones: ``pip install`` and
``outlast dev`` lines are not run):

- ``examples/hello.py``, the first app of the README and of Getting started: a worker process,
  then ``python -m examples.hello``;
- ``examples/research_report.py`` and ``examples/backlog_approval.py``: the three
  ``python3 -m examples...`` lines of docs/examples.md, each of which starts its own worker
  (``tests/integration/test_examples.py`` kills their workers in every window);
- ``examples/payments.py``: the commands of its docstring (migrate, a worker, an enqueue that
  waits), then its crash: a worker armed to die after the transfer, a fresh one, one ledger row;
- ``examples/support_agent.py``: run (crash, approval, reply) by ``tests/integration/test_examples.py``;
- the web dashboard's walkthrough: its commands as written, and its user approves through the
  dashboard's API, as the page's button does.

Every Python block of the README, CONTRIBUTING and the docs, and every module of ``examples/``, is
also compiled (and each example imported) by ``tests/unit/test_docs.py``; the docs' blocks are all
run here but for the skipped ones, each listed with its reason when the test runs. The README's one
block is ``examples/hello.py`` (run above); CONTRIBUTING's one block is a fragment of a test, only
compiled.
"""

from __future__ import annotations

import importlib
import inspect
import re
import shlex
import signal
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
    clients: list[Client] = []
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
                queues = ns["app"].queues("default")  # the queues `outlast worker` serves
                w = InProcessWorker(ns["app"], world.settings(), queues)
                w.start()
                workers.append(w)
            else:
                assert block.marker == "", f"{where}: unknown marker {block.marker!r}"
            # as a reader runs it: without this module's `from __future__ import annotations` (a
            # pydantic model of the page could not resolve its postponed annotations)
            exec(compile(block.code, where, "exec", dont_inherit=True), ns)
            # every client a block left named, even one a later block names again, is closed below
            clients.extend(v for v in ns.values() if isinstance(v, Client) and v not in clients)
        for name, fn in list(ns.items()):
            if name.startswith("test_") and inspect.isfunction(fn):
                wants = inspect.signature(fn).parameters
                fn(**({"outlast_harness": harness} if "outlast_harness" in wants else {}))
    finally:
        for w in workers:
            w.stop()
        for client in clients:
            if not client._loop.is_closed():  # not closed by its block
                client.close()
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


def example_commands(page: Path) -> list[list[str]]:
    """The ``python3 -m examples...`` lines of the page's bash blocks, as argument lists."""
    found = []
    for block in re.findall(r"^```bash\n(.*?)^```", page.read_text(), re.M | re.S):
        for line in block.splitlines():
            words = shlex.split(line, comments=True)
            if words[:2] == ["python3", "-m"] and words[2].startswith("examples."):
                found.append(words[2:])
    return found


def test_the_examples_page_runs_as_written(world: World) -> None:
    """docs/examples.md: each ``python3 -m examples.NAME`` line, with its argument, ends as its
    comment says."""
    expected = {
        ("examples.research_report",): ["approved by editor", " succeeded: "],
        ("examples.backlog_approval",): [" succeeded: ", "approved_backlog_items: item 1 "],
        ("examples.backlog_approval", "reject"): [" failed: ", "approved_backlog_items: item -  (no row)"],
    }
    commands = example_commands(DOCS / "examples.md")
    assert sorted(map(tuple, commands)) == sorted(expected), commands
    try:
        for args in commands:
            done = subprocess.run(
                [sys.executable, "-m", *args],
                env=world.env(),
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert done.returncode == 0, done.stdout + done.stderr
            for said in expected[tuple(args)]:
                assert said in done.stdout, f"python3 -m {' '.join(args)}:\n{done.stdout}"
    finally:
        world.stop_all()
        with psycopg.connect(world.database_url, autocommit=True) as conn:
            for module in ("research_report", "backlog_approval"):
                shop = importlib.import_module(f"examples.{module}").tables_schema(world.schema)
                conn.execute(f'DROP SCHEMA IF EXISTS "{shop}" CASCADE'.encode())


def docstring_commands(module: Path) -> list[list[str]]:
    """The indented ``outlast ...`` lines of a module's docstring (``VAR=value`` kept in front)."""
    doc = module.read_text().split('"""')[1]
    found = []
    for line in doc.splitlines():
        words = shlex.split(line, comments=True) if line.startswith("    ") else []
        if "outlast" in words and all("=" in w for w in words[: words.index("outlast")]):
            found.append(words)
    return found


def test_the_payments_example_runs_as_its_docstring_says(world: World) -> None:
    """examples/payments.py: migrate, a worker, the enqueue that waits; then the crash it shows: a
    worker armed to die right after the transfer, a fresh one; the ledger holds one row per run."""
    commands = docstring_commands(ROOT / "examples" / "payments.py")
    migrate, worker, enqueue, armed, fresh = commands
    assert [migrate, worker, fresh] == [
        ["outlast", "migrate"],
        *[["outlast", "worker", "examples.payments:app"]] * 2,
    ]
    assert armed == ["OUTLAST_FAILPOINTS=after_effect:transfer", *fresh], armed

    def ledger(run_id: str) -> list[tuple[Any, ...]]:
        return world.sql(
            "SELECT amount, to_account FROM example_bank.ledger WHERE idempotency_key LIKE %s", f"{run_id}:%"
        )

    ids: list[str] = []  # the bank's schema is the example's, shared: only these runs' rows go
    try:
        assert world.cli(*migrate[1:]).returncode == 0
        first = world.worker(*worker[2:])
        paid = world.cli(*enqueue[1:])
        assert paid.returncode == 0, paid.stdout + paid.stderr + world.logs()
        run_id = paid.stdout.split()[1]
        ids.append(run_id)
        assert "succeeded" in paid.stdout and "R-" in paid.stdout, paid.stdout
        assert ledger(run_id) == [(120, "alice")]
        first.kill()
        first.wait(10)

        failpoint = dict(w.split("=", 1) for w in armed[: armed.index("outlast")])
        dying = world.worker(*armed[armed.index("outlast") + 2 :], **failpoint)
        again = world.cli(*[w for w in enqueue[1:] if w != "--wait"])
        assert again.returncode == 0, again.stderr
        crashed = again.stdout.split()[1]
        ids.append(crashed)
        assert dying.wait(30) == -signal.SIGKILL, f"the armed worker should have died:\n{world.logs()}"
        assert ledger(crashed) == [(120, "alice")]  # executed; its result never saved
        world.worker(*fresh[2:])
        with Client(settings=world.settings()) as c:
            done = c.wait(crashed, timeout=60)
        assert done.state == "succeeded", f"{done.error}\n{world.logs()}"
        assert ledger(crashed) == [(120, "alice")]  # asked again with the same key: still one row
    finally:
        world.stop_all()
        for run_id in ids:
            for table in ("ledger", "outbox"):
                world.sql(f"DELETE FROM example_bank.{table} WHERE idempotency_key LIKE %s", f"{run_id}:%")
            world.sql("DELETE FROM example_bank.audit WHERE run_id = %s", run_id)
