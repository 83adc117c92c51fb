"""Captures by delta (``outlast._captured``): a model request's capture stores the messages no
earlier capture of the run stored, against the previous one; every reader shows it whole; a
resume reads no capture body."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from starlette.testclient import TestClient

from outlast import AsyncClient
from outlast._bundle import export
from outlast._captured import requests
from outlast._journal import canonical, digest
from outlast._replay import replay_bundle
from outlast._status import describe, operation, render_operation
from outlast.dashboard import create_app
from outlast.identity import add_user
from outlast.store import Store
from outlast.testing import HarnessFactory
from tests.apps import reader


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    monkeypatch.setattr(reader, "RECORD", True)
    monkeypatch.setattr(reader, "SEEN", [])
    yield reader.SEEN


def test_a_300_step_agent_s_captures_grow_with_its_content_and_none_is_withheld(
    outlast_harness: HarnessFactory, tmp_path: Path
) -> None:
    users = tmp_path / "users.toml"
    auth = {"Authorization": f"Bearer {add_user(users, 'vera', ['viewers'])}"}
    h = outlast_harness(reader.app, max_payload=65536, users=str(users))
    h.start_worker()
    rid = h.client.enqueue("reading", {"steps": 300}).id
    assert h.wait(rid, "succeeded", timeout=240).result == "done"
    entries = h.client.journal(rid)
    captures = [e for e in entries if e.kind == "capture"]
    assert len(captures) == 301 and not [e for e in captures if "withheld" in e.fields]
    stored = sum(len(e.body.encode()) for e in captures)
    content = 300 * reader.PAGE
    assert stored < 3 * content, f"{stored} bytes stored for {content} bytes of content"
    whole = requests(entries)[captures[-1].seq]
    text = canonical(whole["request"])
    assert whole["request_hash"] == digest(text) and whole["bytes"] == len(text.encode())
    assert len(whole["request"]["messages"]) == 601 and whole["bytes"] > 300 * reader.PAGE
    assert h.client.verify(rid) is None  # the chain covers every message stored

    # The run's page: each request named, the last one whole (another on asking), the timeline
    # each capture as stored; a page the size of the content, not of 301 growing histories.
    with TestClient(create_app(h.settings), base_url="http://127.0.0.1") as http:
        page = http.get(f"/runs/{rid}", headers=auth).text
        first = http.get(f"/runs/{rid}", params={"op": captures[0].op_id}, headers=auth).text
    # each page read is shown three times (its result, the capture that added it, the last request
    # whole), JSON-indented and HTML-escaped: about 8.5 times the content (showing 301 requests
    # whole, as the page did, would be 150 times)
    assert len(page) < 12 * content, f"a page of {len(page)} characters for {content} of content"
    assert page.count('<pre class="capture">') == 1 and page.count("show the request</a>") == 300
    for shown, op in ((page, captures[-1].op_id), (first, captures[0].op_id)):
        after = shown.split(f'id="capture-{op}"', 1)[1]
        assert '<pre class="capture">' in after[:400]  # that one whole
    assert first.count('<pre class="capture">') == 1 and len(first) < len(page)


def test_a_long_agent_stores_each_tool_result_once_at_most_twice_its_content_and_flat(
    outlast_harness: HarnessFactory, seen: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each page the tool returns is read back to the model in the next request: its capture
    # refers to the page in the tool's result (``texts``) instead of storing it again.
    monkeypatch.setattr(reader, "PAGE", 4096)
    h = outlast_harness(reader.app)
    h.start_worker()
    steps = 80
    rid = h.client.enqueue("reading", {"steps": steps}).id
    assert h.wait(rid, "succeeded", timeout=240).result == "done"
    schema = h.settings.schema
    with psycopg.connect(h.database_url) as conn:
        rows = conn.execute(
            f"SELECT seq, kind, octet_length(body) FROM {schema}.journal WHERE run_id = %s ORDER BY seq",
            (rid,),
        ).fetchall()
        held = conn.execute(
            f"SELECT coalesce(sum(size), 0) FROM {schema}.payloads WHERE run_id = %s", (rid,)
        ).fetchone()
    assert held is not None and held[0] == 0  # 4 KB results: all in the journal
    stored = sum(r[2] for r in rows)
    content = steps * reader.PAGE
    assert stored <= 2 * content, f"{stored} bytes stored for {content} bytes of content"
    ends = [i for i, r in enumerate(rows) if r[1] == "capture"]  # step k ends at its capture
    first, second = (
        sum(r[2] for r in rows[: ends[40] + 1]),
        sum(r[2] for r in rows[ends[40] + 1 : ends[80] + 1]),
    )
    assert second <= 1.3 * first, f"steps 41-80 stored {second} bytes, steps 1-40 {first}"
    entries = h.client.journal(rid)
    whole = requests(entries)
    captures = [e for e in entries if e.kind == "capture"]
    assert all("texts" in e.fields for e in captures[1:]) and not [
        e for e in captures if "withheld" in whole[e.seq]
    ]
    assert [whole[e.seq]["request"]["messages"] for e in captures] == seen  # each whole, as the model saw it
    assert h.client.verify(rid) is None


def test_status_the_bundle_and_offline_replay_show_each_request_whole_as_the_model_saw_it(
    outlast_harness: HarnessFactory, seen: list[Any], tmp_path: Path
) -> None:
    h = outlast_harness(reader.app)
    h.start_worker()
    rid = h.client.enqueue("reading", {"steps": 5}).id
    h.wait(rid, "succeeded")
    entries = h.client.journal(rid)
    captures = [e for e in entries if e.kind == "capture"]
    assert len(captures) == len(seen) == 6
    assert "rest" in captures[-1].fields and "request" not in captures[-1].fields  # stored by delta
    for e, saw in zip(captures, seen, strict=True):
        view = operation(entries, e.op_id or "")
        assert view is not None
        shown = next(x for x in view["entries"] if x["kind"] == "capture")
        assert shown["request"]["messages"] == saw
        assert shown["request_hash"] == digest(canonical(shown["request"]))
    assert json.dumps(seen[-1][-1]["parts"][0]["content"]) in render_operation(rid, view)

    async def read() -> dict[str, Any]:
        async with AsyncClient(settings=h.settings) as c:
            await export(c, rid, tmp_path / "bundle")
            return await describe(c, rid)

    info = asyncio.run(read())
    # status --json and the run page: the last request whole, the others named with their size
    assert info["captures"][-1]["request"]["messages"] == seen[-1]
    assert [c.get("messages") for c in info["captures"][:-1]] == [len(s) for s in seen[:-1]]
    assert not [c for c in info["captures"][:-1] if "request" in c or not c["bytes"]]
    lines = [json.loads(x) for x in (tmp_path / "bundle" / "journal.jsonl").read_text().splitlines()]
    assert [x["request"]["messages"] for x in lines if x["kind"] == "capture"] == seen
    report = asyncio.run(replay_bundle(tmp_path / "bundle", reader.app))
    assert report.agrees, str(report)  # the bundle's chain verifies: the whole requests are beside it


def test_a_trimmed_history_stores_only_the_messages_not_stored_before(
    outlast_harness: HarnessFactory, seen: list[Any]
) -> None:
    h = outlast_harness(reader.app)
    h.start_worker()
    rid = h.client.enqueue("reading", {"steps": 12, "trimmed": True}).id
    h.wait(rid, "succeeded")
    entries = h.client.journal(rid)
    captures = [e for e in entries if e.kind == "capture"]
    whole = requests(entries)
    assert [whole[e.seq]["request"]["messages"] for e in captures] == seen
    assert max(len(s) for s in seen) == 5  # the processor trimmed: no request extends the one before
    stored = [h for e in captures for h in e.fields["new"]]
    distinct = {digest(canonical(m)) for s in seen for m in s}
    assert len(stored) == len(set(stored)) == len(distinct)  # each message stored once
    later = captures[-1].fields
    assert later["base"] == captures[-2].fields["request_hash"]
    assert [s for s in later["messages"] if isinstance(s, list)] == [[0, 1], [3, 5]]  # kept, by slice
    assert len(later["new"]) == 2  # the model's last call and its return


def test_a_resume_reads_no_capture_body_and_captures_go_on_by_delta(
    outlast_harness: HarnessFactory, seen: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    h = outlast_harness(reader.app)
    h.start_worker()
    rid = h.client.enqueue("reading", {"steps": 4, "then": 3}).id
    h.wait(rid, "waiting")
    before = [e for e in h.client.journal(rid) if e.kind == "capture"]
    read: list[tuple[str, dict[str, Any], list[dict[str, Any]]]] = []
    rows = Store._rows

    async def spied(self: Store, name: str, **params: Any) -> list[dict[str, Any]]:
        got = await rows(self, name, **params)
        read.append((name, params, got))
        return got

    monkeypatch.setattr(Store, "_rows", spied)
    h.client.send(rid, "go", "on")
    h.wait(rid, "succeeded")
    monkeypatch.undo()
    resumed = [got for name, _, got in read if name == "journal_to_replay"]
    assert resumed and "journal" not in [name for name, _, _ in read]
    for got in resumed:
        skipped = [r for r in got if r["kind"] == "capture"]
        assert len(skipped) == len(before) and all(r["body"] is None for r in skipped)
    learnt = [(p, got) for name, p, got in read if name == "captures"]
    assert len(learnt) == 1 and len(learnt[0][1]) == len(before)  # once, at the next capture

    entries = h.client.journal(rid)
    captures = [e for e in entries if e.kind == "capture"]
    after = captures[len(before)].fields
    assert after["base"] == before[-1].fields["request_hash"]
    old = {k for e in before for k in e.fields["new"]}
    assert not old & set(after["new"])  # nothing stored twice across the resume
    # The model's answers journaled before the resume are served from it as they were: referenced,
    # not stored again (pydantic-ai gives the requests it rebuilds on replay a new timestamp).
    assert [m["kind"] for m in after["new"].values()].count("response") == 1  # its last: "done"
    assert sum(isinstance(s, list) for s in after["messages"]) == 4
    whole = requests(entries)
    assert [whole[e.seq]["request"]["messages"] for e in captures] == seen
    assert h.client.verify(rid) is None
