"""The fleet's Redis figures on a real Redis Cluster: a queue's length, pending entries, oldest
pending age and dead letters come from the queue's own slot, the clock from any node."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from outlast.queue import Queue
from tests.faults.cluster import PrivateCluster

pytestmark = pytest.mark.slow


@pytest.fixture
def cluster() -> Iterator[PrivateCluster]:
    root = Path(tempfile.mkdtemp(prefix="outlast-cluster-fleet-"))
    c = PrivateCluster(root)
    try:
        c.start()
        yield c
    finally:
        c.destroy()
        shutil.rmtree(root, ignore_errors=True)


async def test_queue_figures_and_dead_letters_on_a_cluster(cluster: PrivateCluster) -> None:
    q = Queue(cluster.url, "fleet")
    try:
        assert cluster.master_of(q.stream("a")) != cluster.master_of(q.stream("b"))  # two slots' masters
        for name in ("a", "b"):
            await q.ensure_group(name)
        for run in ("r1", "r2", "r3"):
            await q.publish("a", run)
        await q.publish("b", "r4")
        (first,) = await q.read("a", "c1", 1, 10)
        await q.dead_letter(first, "a test")  # moved out of the stream
        await q.read("a", "c1", 1, 10)  # pending, never acknowledged

        a, b = await q.figures("a"), await q.figures("b")
        assert (a.length, a.pending, a.dead_letters) == (2, 1, 1)
        assert a.oldest_pending_age is not None and 0 <= a.oldest_pending_age < 60
        assert (b.length, b.pending, b.oldest_pending_age, b.dead_letters) == (1, 0, None, 0)

        (letter,) = await q.dead_letters("a")
        assert letter["run"] == "r1" and letter["_reason"] == "a test"
        assert await q.dead_letters("a", entry_id=letter["_id"]) == [letter]
        assert await q.drop_dead_letter("a", letter["_id"])
        assert (await q.figures("a")).dead_letters == 0
    finally:
        await q.close()
