"""A worker killed between storing a value in the payload store and journaling the entry that
refers to it (``after_payload_stored``): the run resumes on another worker, which stores its value
again, once; the value the dead worker stored is an orphan until the sweeper deletes it, past
``OUTLAST_PAYLOAD_GRACE``. Counted in the ``payloads`` table, before and after the sweep.

``large_fresh``'s read returns a different text at each call: the orphan is a row of its own. The
``large`` workflow's read returns the same text again: the resume stores the same row again (made
young again), which the sweep keeps, as an entry refers to it.

(A payload changed in the store, refused by ``outlast verify`` and by the run that reads it:
tests/integration/test_payloads.py.)"""

from __future__ import annotations

import time

import pytest

from outlast import Client
from tests.conftest import World, wait_for
from tests.crash import killed, settled

pytestmark = pytest.mark.crash

APP = "tests.apps.payloads:app"
SMALL = {"OUTLAST_MAX_PAYLOAD": "4096"}  # an entry past it holds its values by reference
GRACE = 1.0  # OUTLAST_PAYLOAD_GRACE of the sweeping worker
SIZE = 100_000


def payloads(world: World, run_id: str) -> list[str]:
    """The SHA-256 of the run's rows in the payload store."""
    return sorted(s for (s,) in world.sql("SELECT sha256 FROM payloads WHERE run_id = %s", run_id))


def referred(world: World, run_id: str) -> set[str]:
    """The SHA-256 of the values the run's journal entries hold by reference."""
    bodies = world.sql(
        "SELECT body::jsonb->'$refs' FROM journal WHERE run_id = %s AND body LIKE '{\"$refs\":%%'", run_id
    )
    return {r["sha256"] for (held,) in bodies for r in held.values()}


def kept(world: World, run_id: str) -> bool:
    """Whether the sweep has seen each of the run's rows and found an entry referring to it."""
    return bool(world.sql("SELECT bool_and(journaled) FROM payloads WHERE run_id = %s", run_id)[0][0])


@pytest.mark.parametrize(("workflow", "rows"), [("large_fresh", 2), ("large", 1)])
def test_killed_between_storing_a_payload_and_journaling_its_reference(
    world: World, workflow: str, rows: int
) -> None:
    client = Client(settings=world.settings())
    try:
        rid = client.enqueue(workflow, {"size": SIZE}).id
        killed(world.worker(APP, OUTLAST_FAILPOINTS="after_payload_stored", **SMALL))
        orphan = payloads(world, rid)
        assert len(orphan) == 1 and not referred(world, rid)  # stored, no entry refers to it

        world.worker(APP, **SMALL)  # the default grace (an hour): its sweeps keep the orphan
        assert settled(client, rid).state == "succeeded"
        stored = payloads(world, rid)
        assert len(stored) == rows, stored  # the resume stored its value once (the same: one row)
        assert len(referred(world, rid)) == 1 and referred(world, rid) <= set(stored)

        time.sleep(GRACE + 0.5)  # the orphan is past the grace: a worker's first sweep deletes it
        world.worker(APP, OUTLAST_PAYLOAD_GRACE=str(GRACE), **SMALL)
        wait_for(lambda: payloads(world, rid) == sorted(referred(world, rid)), 30, 0.2, "the orphan swept")
        wait_for(lambda: kept(world, rid), 30, 0.2, "the referred value kept by the sweep")
        assert client.verify(rid) is None  # what the journal refers to is whole
        assert client.status(rid).result == {"length": SIZE} | ({"same": 1, "told": 100} if rows == 1 else {})
    finally:
        client.close()
