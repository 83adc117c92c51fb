"""Messages under real crashes: a worker process killed (SIGKILL, by its failpoint) after a take is
committed but before the workflow goes on with the message, and a producer process killed between
its send's commit and the wake-up it publishes. Counted in the world (tests/apps/chat.py): each
message acted on once (``handled``) and dispatched once (``dispatches``), each taken by one journal
entry, none lost, none taken twice."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from outlast import Client
from tests.apps import chat
from tests.conftest import ROOT, World, wait_for
from tests.crash import killed
from tests.integration.test_waiting import reach

pytestmark = pytest.mark.crash

APP = "tests.apps.chat:app"


def counted(world: World, run_id: str) -> tuple[list[int], int, int]:
    """(the message numbers handled, dispatches, message entries journaled) of the run."""
    handled = [n for (n,) in world.sql("SELECT n FROM handled WHERE run_id = %s ORDER BY n", run_id)]
    [(dispatches,)] = world.sql("SELECT count(*) FROM dispatches WHERE run_id = %s", run_id)
    [(entries,)] = world.sql("SELECT count(*) FROM journal WHERE run_id = %s AND kind = 'message'", run_id)
    return handled, dispatches, entries


def test_a_worker_killed_after_the_take_is_committed_takes_no_message_twice(world: World) -> None:
    chat.setup(world.database_url, world.schema)
    with Client(settings=world.settings()) as c:
        runs = [c.enqueue("converse", {"turns": 3}).id for _ in range(3)]
        for run_id in runs:
            for n in range(3):
                c.send(run_id, "in", {"n": n})
        killed(world.worker(APP, OUTLAST_FAILPOINTS="after_take"))  # the first take committed: dies
        assert world.sql("SELECT count(*) FROM messages WHERE taken_seq IS NOT NULL") >= [(1,)]
        world.worker(APP)
        for run_id in runs:
            run = c.wait(run_id, timeout=90)
            assert run.state == "succeeded", run.reason
            assert run.result == [{"n": 0}, {"n": 1}, {"n": 2}]  # the one taken, served from the journal
            assert counted(world, run_id) == ([0, 1, 2], 3, 3)
            taken = world.sql("SELECT taken_op FROM messages WHERE run_id = %s ORDER BY seq", run_id)
            assert taken == [("op-1",), ("op-3",), ("op-5",)]


def test_a_producer_killed_between_its_send_and_the_wake_up_loses_no_message(world: World) -> None:
    chat.setup(world.database_url, world.schema)
    with Client(settings=world.settings()) as c:
        run_id = c.enqueue("converse", {"turns": 2}).id
        world.worker(APP)
        reach(c, run_id, "waiting")
        script = textwrap.dedent(
            f"""
            from outlast import Client, _failpoints as failpoints
            failpoints.arm("after_send")
            with Client.from_env() as c:
                c.send({run_id!r}, "in", {{"n": 0}}, message_id="p-0")
            """
        )
        producer = subprocess.Popen([sys.executable, "-c", script], env=world.env(), cwd=ROOT)
        killed(producer)  # committed, then killed before it published the wake-up
        assert world.sql("SELECT count(*) FROM messages WHERE run_id = %s", run_id) == [(1,)]
        # woken by the sweeper (the wake-up was never published), the run takes it
        wait_for(lambda: counted(world, run_id)[0] == [0], 30, what="the message acted on")
        c.send(run_id, "in", {"n": 1}, message_id="p-1")
        run = c.wait(run_id, timeout=60)
        assert run.state == "succeeded", run.reason
        assert run.result == [{"n": 0}, {"n": 1}]
        assert counted(world, run_id) == ([0, 1], 2, 2)
