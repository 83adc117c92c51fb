"""What the model received: a ``kind="model"`` tool's ``current_action().capture(request)`` is
journaled with its operation (a chained ``capture`` entry, before the result), the secret API
key masked; shown by ``status --op``, the run's page, and carried by the bundle."""

from __future__ import annotations

import asyncio
import html
import json
from pathlib import Path

from starlette.testclient import TestClient

from outlast import AsyncClient
from outlast._bundle import export
from outlast._status import describe, operation, render, render_operation
from outlast.dashboard import create_app
from outlast.identity import add_user
from outlast.testing import HarnessFactory
from tests.apps import orders

KEY = "cP3x-Qm8Rt1Wz6Kb0Lv5Nh9Gj2Fs7Dy4A"
NOTE = 'gift wrap, "please"'


def test_a_model_call_journals_the_request_it_sent_before_its_result(
    outlast_harness: HarnessFactory, tmp_path: Path
) -> None:
    users = tmp_path / "users.toml"
    token = add_user(users, "alice", ["ops"])
    h = outlast_harness(orders.app, secret_key=KEY, users=str(users))
    h.start_worker()
    rid = h.client.enqueue("order", {"item": "lamp", "qty": 1, "note": NOTE}).id
    assert h.wait(rid, "succeeded").result["summary"] == NOTE[:20]

    entries = h.client.journal(rid)
    assert [(e.op_id, e.kind) for e in entries if e.op_id == "op-3"] == [
        ("op-3", "intention"),
        ("op-3", "capture"),
        ("op-3", "result"),
    ]
    assert [e.kind for e in entries].count("capture") == 1  # the tools that never capture: nothing
    assert h.client.verify(rid) is None  # chained like every entry
    captured = next(e.data for e in entries if e.kind == "capture")
    request = captured["request"]
    assert request["headers"] == {"authorization": "Bearer [secret]"}
    assert request["body"]["messages"][2] == {"role": "user", "content": NOTE}
    assert captured["tool"] == "summarize" and len(captured["request_hash"]) == 64
    assert orders.KEY not in json.dumps([e.data for e in entries])

    view = operation(entries, "op-3")
    assert view is not None and view["state"] == "done"
    shown = render_operation(rid, view)
    assert "Bearer [secret]" in shown and "Summarize the order note" in shown and orders.KEY not in shown

    async def read() -> dict[str, object]:
        async with AsyncClient(settings=h.settings) as c:
            await export(c, rid, tmp_path / "bundle")
            return await describe(c, rid)

    info = asyncio.run(read())
    assert "captured     op-3 summarize" in render(info)
    bundled = (tmp_path / "bundle" / "journal.jsonl").read_text()
    assert '"kind": "capture"' in bundled and "Bearer [secret]" in bundled and orders.KEY not in bundled

    with TestClient(create_app(h.settings), base_url="http://127.0.0.1") as http:
        page = http.get(f"/runs/{rid}", headers={"Authorization": f"Bearer {token}"})
    assert page.status_code == 200
    text = html.unescape(page.text)
    assert "What the model received" in text and "Bearer [secret]" in text and orders.KEY not in text


def test_a_request_over_the_payload_limit_is_kept_whole(outlast_harness: HarnessFactory) -> None:
    h = outlast_harness(orders.app, secret_key=KEY, max_payload=2048)
    h.start_worker()
    rid = h.client.enqueue("order", {"item": "lamp", "qty": 1, "note": "x" * 1500}).id
    h.wait(rid, "succeeded")
    captured = next(e.data for e in h.client.journal(rid) if e.kind == "capture")
    assert "withheld" not in captured and captured["bytes"] > 3000 and len(captured["request_hash"]) == 64
    assert captured["request"]["body"]["messages"][2]["content"] == "x" * 1500
