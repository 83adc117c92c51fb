"""The canary: one secret value, passed by workflows to tools as a secret argument and then let
out every careless way there is (a tool that returns it, as is or escaped in JSON text, a tool
error and a workflow exception that quote it, as is or its ``repr``, a workflow result that holds
it, an approver who types it into a revision), is looked for in every place a secret could land:
the journal, ``runs.result``, ``runs.error`` and ``runs.reason``, the events, the approvals, the
logs, the spans, the bundle, and the dashboard's pages and API.

The canary is a plain value, or one that each serialisation writes otherwise (a PEM key's
newlines, quotes, backslashes, the newline a line read from a file ends with, letters beyond
ASCII), around a random core: the core, which every escaped form keeps as is, is what is looked
for, so that a form written with escapes (``\\n``, ``\\u00e9``, ``%0A``) is found as surely as the
value itself.

The control is the same test with the sealing turned off (``outlast._secrets.SEALING``): it must
find the canary in each place, so that the sealed run cannot pass by looking where nothing lands.
Real Postgres and Redis, an in-process worker (outlast.testing), the dashboard through a
``TestClient``, spans through the OpenTelemetry SDK's in-memory exporter.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from starlette.testclient import TestClient
from structlog.testing import capture_logs

from outlast import AsyncClient, DecisionRefused, _secrets as secrets, _tracing as tracing
from outlast._bundle import export
from outlast.dashboard import create_app
from outlast.identity import add_user
from outlast.testing import HarnessFactory, outlast_harness, outlast_servers
from tests.apps.secret import app

__all__ = ["outlast_harness", "outlast_servers"]  # the fixtures, without the plugin installed

KEY = "cN4r-Vx8Tq1Ly6Ko3Bw9Zs0Hd5Mf2Gj7Pe_Ua"  # OUTLAST_SECRET_KEY
CANARIES = {  # each around its {core}
    "plain": "canary-{core}",
    "pem": "-----BEGIN PRIVATE KEY-----\nMIIEvQ{core}\n" + "MIIB" * 16 * 24 + "\n-----END PRIVATE KEY-----",
    "quotes": 'it\'s "{core}"',
    "backslashes": "C:\\keys\\{core}\\",
    "line-of-a-file": "{core}\n",
    "non-ascii": "clé-{core}-ключ",
}


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """An in-memory exporter on the process's SDK provider (set here if none is: the global
    provider can be set only once per process), with tool arguments and results in the spans."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.configure(payloads=True)
    yield exporter
    tracing.configure(payloads=False)
    exporter.shutdown()


def text(value: Any) -> str:
    return json.dumps(value, default=str, ensure_ascii=False)


def said(canary: str, sealing: bool) -> dict[str, str]:
    """What the workflow ``leaky`` returns: with the canary, or (sealed) with each of its forms
    masked inside its quotes."""
    q = repr(canary)[0]  # the quote that repr and ascii write it in
    if sealing:
        shown = js = ju = secrets.MASK
        quoted = ascii_ = f"{q}{secrets.MASK}{q}"
    else:
        shown, quoted, ascii_ = canary, repr(canary), ascii(canary)
        js, ju = json.dumps(canary)[1:-1], json.dumps(canary, ensure_ascii=False)[1:-1]
    return {
        "echoed": f"the service echoed {shown}",
        "dumped": f'{{"key": "{js}"}} {{"key": "{ju}"}} {ascii_}',
        "refused": f"the service refused key {shown} (and said so)",
        "complained": f"bad key {quoted}",
        "key": shown,
    }


@pytest.mark.parametrize("form", list(CANARIES))
@pytest.mark.parametrize("sealing", [True, False], ids=["sealed", "control"])
def test_the_canary_is_in_no_place_a_secret_could_land(
    sealing: bool,
    form: str,
    outlast_harness: HarnessFactory,
    spans: InMemorySpanExporter,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setattr(secrets, "SEALING", sealing)
    core = uuid.uuid4().hex
    canary = CANARIES[form].format(core=core)
    monkeypatch.setenv("SECRET_API_KEY", canary)  # the workflows' secret, as a vault would give it
    users = tmp_path / "users.toml"
    token = add_user(users, "alice", ["ops"])
    h = outlast_harness(app, secret_key=KEY, users=str(users))
    h.sql("CREATE TABLE executions (run_id text, what text)")  # where `pay` records its effect
    monkeypatch.setenv("OUTLAST_DATABASE_URL", h.database_url)
    monkeypatch.setenv("OUTLAST_SCHEMA", h.schema)
    dashboard = TestClient(create_app(h.settings), base_url="http://127.0.0.1")
    bearer = {"Authorization": f"Bearer {token}"}
    page = {**bearer, "Accept": "text/html"}
    places: dict[str, list[str]] = {}

    def look(place: str, found: Any) -> None:
        places.setdefault(place, []).append(found if isinstance(found, str) else text(found))

    with capture_logs() as logs, dashboard:
        h.start_worker()
        ok = h.client.enqueue("leaky", {"fail": False}).id
        failed = h.client.enqueue("leaky", {"fail": True}).id
        asked = h.client.enqueue("approved_charge", {"amount": 5}).id
        h.wait(asked, "awaiting_approval")
        look("the dashboard", dashboard.get("/approvals", headers=page).text)
        look("the dashboard", dashboard.get("/api/approvals", headers=bearer).json())
        (request,) = h.client.approvals(asked)
        # The approver types the secret into the revision (and changes the amount).
        typed = {**request["args"], "api_key": canary, "amount": 7}
        decide = {"approver": "ann", "comment": "7, not 5", "args_hash": request["args_hash"]}
        if sealing:
            with pytest.raises(DecisionRefused, match="secret argument 'api_key' a new value") as refused:
                h.client.revise(asked, request["op_id"], args=typed, **decide)
            assert core not in str(refused.value)
            typed["api_key"] = request["args"]["api_key"]  # kept as shown: sealed
        h.client.revise(asked, request["op_id"], args=typed, **decide)
        done = {rid: h.wait(rid) for rid in (ok, failed, asked)}
        h.stop_worker()
        for rid in done:
            look("the dashboard", dashboard.get(f"/runs/{rid}", headers=page).text)
            look("the dashboard", dashboard.get(f"/api/runs/{rid}", headers=bearer).json())

    # The runs went as their workflows say, the secret used where it was passed.
    assert [done[r].state for r in (ok, failed, asked)] == ["succeeded", "failed", "succeeded"]
    assert done[asked].result == {"paid": 7, "with": "right key"}

    for rid in done:
        look("the journal", [e.data for e in h.client.journal(rid)])
        look("the events", h.events(rid))
        out = tmp_path / f"bundle-{rid}"

        async def bundle(rid: str = rid, out: Path = out) -> list[Path]:
            async with AsyncClient(settings=h.settings) as c:
                return await export(c, rid, out)

        look("the bundle", "\n".join(f.read_text() for f in asyncio.run(bundle())))
    look("runs.result", h.sql("SELECT result::text FROM runs WHERE id = %s", ok))
    look("runs.error", h.sql("SELECT error::text FROM runs WHERE id = %s", failed))
    look("runs.reason", h.sql("SELECT reason FROM runs WHERE id = %s", failed))
    look("the approvals", h.sql("SELECT args::text, new_args::text FROM approvals"))
    look("the logs", logs)
    look("the spans", [dict(s.attributes or {}) for s in spans.get_finished_spans()])

    assert len(places) == 10
    where = sorted(place for place, found in places.items() if any(core in f for f in found))
    if sealing:
        assert where == [], f"the canary is in {', '.join(where)}"
        masked = sorted(place for place, found in places.items() if any(secrets.MASK in f for f in found))
        assert {"runs.result", "runs.error", "runs.reason", "the logs"} <= set(masked)
    else:  # the control: every place the test looks in is one a secret lands in, unsealed
        assert where == sorted(places)
    assert done[ok].result == said(canary, sealing)
