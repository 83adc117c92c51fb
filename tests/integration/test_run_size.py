"""A run's size, on real Postgres and Redis with real worker processes: a chat run (carried forward
every few turns) passes OUTLAST_RUN_SIZE_WARN, its worker is killed and another resumes it; the
run has exactly one 'size_warning' event and the workers one ``run.size_warning`` log line between
them; the count the appends kept (``journal_bytes``) is the bytes its journal holds, every
generation; the metric counts what the worker journaled; ``outlast status`` (text and JSON) and the
run page show the size by part.

Counted in the world: the ``journal``, ``journal_past``, ``events`` and ``runs`` rows, the workers'
log files and the metrics endpoint.
"""

from __future__ import annotations

import json
import signal
from typing import Any

from starlette.testclient import TestClient

from outlast import Client
from outlast.dashboard import create_app
from tests.apps import chat
from tests.conftest import World, wait_for
from tests.integration.test_dashboard_live import people
from tests.integration.test_metrics import free_port, scrape, value

APP = "tests.apps.chat:app"
WARN = 3000  # bytes: passed at the third turn, in the first generation
EVERY, TOTAL = 4, 12
TEXT = "x" * 400  # each message's text: a turn journals about 1.3 KB


def stored(world: World, run_id: str) -> int:
    """The bytes of the run's journal entries as Postgres holds them, every generation kept."""
    ((now,),) = world.sql(
        "SELECT coalesce(sum(octet_length(body)), 0) FROM journal WHERE run_id = %s", run_id
    )
    ((past,),) = world.sql(
        "SELECT coalesce(sum(octet_length(body)), 0) FROM journal_past WHERE run_id = %s", run_id
    )
    return int(now + past)


def warnings(world: World, run_id: str) -> list[dict[str, Any]]:
    rows = world.sql("SELECT detail FROM events WHERE run_id = %s AND kind = 'size_warning'", run_id)
    return [d for (d,) in rows]


def turn(world: World, client: Client, run_id: str, n: int) -> None:
    """Send message ``n`` and wait until the run has acted on it and waits for the next."""
    client.send(run_id, "in", {"n": n, "text": TEXT}, message_id=f"m-{n}")
    wait_for(
        lambda: (
            world.sql("SELECT count(*) FROM handled WHERE run_id = %s", run_id) == [(n + 1,)]
            and world.sql("SELECT state FROM runs WHERE id = %s", run_id) == [("waiting",)]
        ),
        30,
        0.05,
        f"turn {n} to be acted on",
    )


def test_a_run_past_its_size_threshold_warns_once_across_a_resume_and_shows_its_size(
    world: World,
) -> None:
    chat.setup(world.database_url, world.schema)
    port = free_port()
    settings, headers = people(world)
    with Client(settings=settings) as client:
        run_id = client.enqueue("chatter", {"every": EVERY, "total": TOTAL}).id
        first = world.worker(APP, "--metrics-port", str(port), OUTLAST_RUN_SIZE_WARN=str(WARN))
        n = 0
        while not warnings(world, run_id):  # turns until the run passes the threshold
            turn(world, client, run_id, n)
            n += 1
            assert n < EVERY, "the threshold was not passed within the first generation"
        # the metric counts what this worker journaled: all of the run's journal so far
        ((journaled,),) = world.sql("SELECT journal_bytes FROM runs WHERE id = %s", run_id)
        assert journaled == stored(world, run_id) >= WARN
        wait_for(
            lambda: (
                (s := scrape(port))
                and value(s, "outlast_journal_bytes_total", workflow="chatter") == journaled
            ),
            15,
            0.1,
            "the metric to count the run's journal",
        )
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        # another worker resumes the run, across its generations, past the threshold all along
        world.worker(APP, OUTLAST_RUN_SIZE_WARN=str(WARN))
        for m in range(n, TOTAL - 1):
            turn(world, client, run_id, m)
        client.send(run_id, "in", {"n": TOTAL - 1, "text": TEXT}, message_id=f"m-{TOTAL - 1}")
        run = client.wait(run_id, timeout=60)
    assert run.state == "succeeded" and run.generation == TOTAL // EVERY, run.reason
    # one warning event and one log line, of all the workers' lines
    (warned,) = warnings(world, run_id)
    assert warned["threshold"] == WARN and warned["bytes"] >= WARN
    lines = world.logged("run.size_warning", run_id=run_id)
    assert len(lines) == 1 and lines[0]["bytes"] == warned["bytes"] and lines[0]["threshold"] == WARN
    # the count the appends kept is the journal's bytes, every generation
    total = stored(world, run_id)
    assert world.sql("SELECT journal_bytes, size_warned_at IS NOT NULL FROM runs WHERE id = %s", run_id) == [
        (total, True)
    ]
    # outlast status, as JSON and as text
    shown = world.cli("status", run_id, "--json")
    assert shown.returncode == 0, shown.stderr
    size = json.loads(shown.stdout)["size"]
    parts = size["parts"]
    assert parts["journal"] + parts["earlier generations"] == total and parts["earlier generations"] > 0
    assert parts["messages"] > TOTAL * len(TEXT) and parts["state"] > 0 and parts["events"] > 0
    assert size["bytes"] == sum(parts.values()) and size["journaled"] == total and size["warned_at"]
    text = world.cli("status", run_id)
    assert text.returncode == 0, text.stderr
    (line,) = [ln for ln in text.stdout.splitlines() if ln.lstrip().startswith("size ")]
    assert "stored (earlier generations" in line and "messages" in line and "journaled" in line
    assert "past OUTLAST_RUN_SIZE_WARN since" in line
    # the run page and its JSON
    with TestClient(create_app(settings), base_url="http://127.0.0.1") as tc:
        page = tc.get(f"/runs/{run_id}", headers=headers)
        assert page.status_code == 200, page.text
        assert 'id="size"' in page.text and "past OUTLAST_RUN_SIZE_WARN" in page.text
        api = tc.get(f"/api/runs/{run_id}", headers=headers).json()
        assert api["size"]["journaled"] == total


def test_a_run_under_its_threshold_shows_its_size_and_never_warns(world: World) -> None:
    chat.setup(world.database_url, world.schema)
    with Client(settings=world.settings()) as client:
        run_id = client.enqueue("chatter", {"every": EVERY, "total": 2}).id
        world.worker(APP)  # the default threshold, 64 MiB
        for n in range(2):
            client.send(run_id, "in", {"n": n, "text": TEXT}, message_id=f"m-{n}")
        assert client.wait(run_id, timeout=60).state == "succeeded"
    assert warnings(world, run_id) == [] and world.logged("run.size_warning") == []
    total = stored(world, run_id)
    assert world.sql("SELECT journal_bytes, size_warned_at FROM runs WHERE id = %s", run_id) == [
        (total, None)
    ]
    size = json.loads(world.cli("status", run_id, "--json").stdout)["size"]
    assert size["journaled"] == total == size["parts"]["journal"] and size["warned_at"] is None
    (line,) = [
        ln for ln in world.cli("status", run_id).stdout.splitlines() if ln.lstrip().startswith("size ")
    ]
    assert "journaled" in line and "OUTLAST_RUN_SIZE_WARN" not in line
