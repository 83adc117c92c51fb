"""Values by reference: a journal entry past ``OUTLAST_MAX_PAYLOAD`` holds its largest values in
the payload store (the ``payloads`` table), once per run, and every reader gets them whole; a
changed payload is refused as a changed entry is; small values stay inline, byte for byte."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from outlast import AsyncClient, _bundle as bundle
from outlast._bundle import export
from outlast._journal import first_bad_crossing
from outlast._payloads import REFS
from outlast._status import describe, operation, render_operation
from outlast.store import Store
from outlast.testing import HarnessFactory
from tests.apps import payloads

SMALL = 4096  # OUTLAST_MAX_PAYLOAD in these tests: an entry past it holds its values by reference


def test_a_large_result_is_stored_once_by_reference_and_read_back_whole(
    outlast_harness: HarnessFactory,
) -> None:
    h = outlast_harness(payloads.app, max_payload=SMALL)
    h.start_worker()
    rid = h.client.enqueue("large", {"size": 300_000}).id
    assert h.wait(rid, "succeeded").result == {"length": 300_000, "same": 1, "told": 100}

    bodies = h.sql("SELECT seq, body FROM journal WHERE run_id = %s ORDER BY seq", rid)
    held = [body for _, body in bodies if body.startswith('{"' + REFS)]
    assert len(held) == 2  # both results of report, each a reference; the note's inline
    rows = h.sql("SELECT sha256, size, media_type, body IS NOT NULL FROM payloads WHERE run_id = %s", rid)
    assert len(rows) == 1  # the same value twice: one row
    sha, size, media, inline = rows[0]
    assert all(sha in body for body in held) and media == "application/json" and inline
    assert size > 300_000

    entries = h.client.journal(rid)  # every reader gets the values whole
    results = [e.data for e in entries if e.kind == "result" and e.op_id in ("op-1", "op-2")]
    assert [r["ok"] == payloads.text_of("a", 300_000) for r in results] == [True, True]
    assert h.client.verify(rid) is None

    async def count() -> int:
        store = Store.from_settings(h.settings)
        await store.open()
        try:
            return await store.payloads.payload_bytes(rid)
        finally:
            await store.close()

    assert asyncio.run(count()) == size


def test_the_bundle_and_status_show_a_referenced_value_whole_and_its_chain_verifies(
    outlast_harness: HarnessFactory, tmp_path: Path
) -> None:
    h = outlast_harness(payloads.app, max_payload=SMALL)
    h.start_worker()
    rid = h.client.enqueue("large", {"size": 50_000}).id
    h.wait(rid, "succeeded")

    async def read() -> tuple[str, str]:
        async with AsyncClient(settings=h.settings) as c:
            await export(c, rid, tmp_path / "bundle")
            view = operation(await c.journal(rid), "op-1")
            assert view is not None
            return render_operation(rid, view), json.dumps(await describe(c, rid))

    op, described = asyncio.run(read())
    whole = payloads.text_of("a", 50_000)
    assert json.dumps(whole)[1:-1] in op and REFS not in op  # whole, as JSON text
    assert REFS not in described
    record, entries = bundle.read(tmp_path / "bundle")
    assert first_bad_crossing(entries, record.journal_head) is None
    assert [e.data["ok"] == whole for e in entries if e.kind == "result" and e.op_id == "op-1"] == [True]
    assert json.dumps(whole)[1:-1] in (tmp_path / "bundle" / "journal.jsonl").read_text()


def test_a_run_of_small_values_stores_nothing_in_the_payload_store(outlast_harness: HarnessFactory) -> None:
    h = outlast_harness(payloads.app, max_payload=SMALL)
    h.start_worker()
    rid = h.client.enqueue("large", {"size": 1000}).id
    assert h.wait(rid, "succeeded").result["length"] == 1000
    assert h.sql("SELECT count(*) FROM payloads")[0][0] == 0
    assert not [b for (b,) in h.sql("SELECT body FROM journal WHERE run_id = %s", rid) if REFS in b]


def test_a_changed_payload_is_refused_by_verify_and_by_the_run_that_reads_it(
    outlast_harness: HarnessFactory,
) -> None:
    h = outlast_harness(payloads.app, max_payload=SMALL)
    h.start_worker()
    rid = h.client.enqueue("large", {"size": 100_000}).id
    h.wait(rid, "succeeded")
    first = h.sql("SELECT min(seq) FROM journal WHERE run_id = %s AND body LIKE '{\"$refs\":%%'", rid)[0][0]
    h.sql("UPDATE payloads SET body = overlay(body placing 'Z'::bytea from 100) WHERE run_id = %s", rid)
    assert h.client.verify(rid) == first

    sleeper = h.client.enqueue("large_then_sleep", {"size": 100_000}).id
    h.wait(sleeper, "waiting")
    h.sql("UPDATE payloads SET body = overlay(body placing 'Z'::bytea from 100) WHERE run_id = %s", sleeper)
    h.advance(61)
    record = h.wait(sleeper, "waiting", timeout=30)
    deadline = time.monotonic() + 30
    while record.reason != "journal_altered" and time.monotonic() < deadline:
        time.sleep(0.2)
        record = h.client.status(sleeper)
    assert record.reason == "journal_altered"


def test_a_resume_reads_a_referenced_result_whole(outlast_harness: HarnessFactory) -> None:
    h = outlast_harness(payloads.app, max_payload=SMALL)
    h.start_worker()
    rid = h.client.enqueue("large_then_sleep", {"size": 200_000}).id
    h.wait(rid, "waiting")
    h.advance(61)
    assert h.wait(rid, "succeeded").result == {"length": 200_000}
    assert h.sql("SELECT count(*) FROM journal WHERE run_id = %s AND kind = 'result'", rid)[0][0] == 1


def test_a_value_past_the_referenced_limit_is_refused_naming_the_run_the_crossing_and_the_setting(
    outlast_harness: HarnessFactory,
) -> None:
    h = outlast_harness(payloads.app, max_payload=SMALL, max_referenced=50_000)
    h.start_worker()
    rid = h.client.enqueue("large", {"size": 60_000}).id
    record = h.wait(rid, "failed", "waiting")
    said = json.dumps(h.journal(rid))
    assert f"run '{rid}': the result of report (op-1)" in said and "OUTLAST_MAX_REFERENCED" in said, record
