"""The object store of the payload store (``OUTLAST_PAYLOAD_STORE``, a SeaweedFS the test starts)
killed under load for a few leases, then started again on the same ports and directory: every run
of five plain calls, each result a large value held by reference, waits while the store is gone
and goes on once it is back. No run fails, none is in doubt, each call has exactly one effect in
the world, every value is in the bucket (the chain of every run verifies, its values read back)."""

from __future__ import annotations

import time

import pytest

from outlast import Client
from tests.conftest import wait_for
from tests.faults import FaultWorld, check_every_run_once, enqueue_many
from tests.weed import Weed, store_url, weed_server  # noqa: F401 (the fixture `weed`)

RUNS = 20
CALLS = 5  # large_chain's calls, each one value in the payload store
SIZE = 200_000  # characters of each call's result: held by reference
CALL = 0.4  # seconds each call sleeps: runs are in flight when the store goes
OUTAGE = 6.0  # three leases of 2 s


def stored(fw: FaultWorld) -> int:
    return int(fw.sql("SELECT count(*) FROM payloads")[0][0])


@pytest.mark.timeout(300)
def test_the_object_store_killed_for_a_few_leases_under_load(fw: FaultWorld, weed: Weed) -> None:
    url = store_url(weed)
    env = {"OUTLAST_PAYLOAD_STORE": url, "OUTLAST_MAX_PAYLOAD": "4096", "OUTLAST_LEASE_TTL": "2"}
    for k in range(2):
        fw.start(f"s3-{k}", "-c", "8", **env)
    ids = enqueue_many(fw, "large_chain", [{"n": CALLS, "seconds": CALL, "size": SIZE} for _ in range(RUNS)])
    wait_for(lambda: stored(fw) >= 5, 60, 0.05, "values to be stored")
    weed.kill()
    before = stored(fw), fw.settled(ids)
    time.sleep(OUTAGE)
    during = stored(fw), fw.settled(ids)
    weed.start()
    print(f"\nkilled at {before[0]} values stored, {before[1]} runs done; {during} when started again")
    assert before[1] < RUNS  # runs were in flight
    assert fw.logged("payloads.unavailable")  # the workers met the outage
    took = fw.wait_settled(ids, timeout=180)
    print(f"all {RUNS} runs settled {took:.1f}s after the object store came back")

    check_every_run_once(fw, ids, ops=CALLS)
    assert len(fw.logged("payloads.unavailable")) <= 2  # said once a worker
    # Each run waited on its worker, its lease renewed (Postgres was up): none was taken over.
    assert fw.sql("SELECT count(*) FROM runs WHERE id = ANY(%s) AND fencing_token > 1", ids)[0][0] == 0
    rows = fw.sql("SELECT count(*), count(*) FILTER (WHERE body IS NULL) FROM payloads")[0]
    assert rows == (RUNS * CALLS, RUNS * CALLS)  # each value stored once, its bytes in the bucket
    client = Client(settings=fw.settings(payload_store=url, max_payload=4096))
    try:
        assert [client.verify(rid) for rid in ids] == [None] * RUNS  # each value read back whole
        assert all(client.status(rid).result["lengths"] == [SIZE // 11 * 11] * CALLS for rid in ids)
    finally:
        client.close()
