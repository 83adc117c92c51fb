"""Artifacts with the payload store in an S3-compatible object store, against a real SeaweedFS the
test starts: the bytes in the bucket, and the dashboard's download a redirect to a presigned URL
that serves them straight from the bucket (no credentials beyond the URL)."""

from __future__ import annotations

from pathlib import Path

import httpx
from starlette.testclient import TestClient

from outlast.dashboard import create_app
from outlast.identity import add_user
from outlast.testing import HarnessFactory
from tests.apps import artifacts
from tests.dashboard import ROLES
from tests.weed import Weed, store_url, weed_server  # noqa: F401 (the fixture `weed`)


def test_an_operator_downloads_an_artifact_through_a_presigned_url(
    outlast_harness: HarnessFactory,
    weed: Weed,
    tmp_path: Path,
) -> None:
    users = tmp_path / "users.toml"
    users.write_text(ROLES)
    olga = add_user(users, "olga", ["oncall"])
    h = outlast_harness(artifacts.app, payload_store=store_url(weed))
    h.start_worker()
    rid = h.client.enqueue("report", {"tally": str(tmp_path / "tally.txt")}).id
    assert h.wait(rid, "succeeded").state == "succeeded"
    rows = h.sql(
        "SELECT body IS NULL FROM payloads p JOIN artifacts a USING (run_id, sha256) WHERE run_id = %s", rid
    )
    assert rows and all(external for (external,) in rows)  # the bytes are the bucket's, not Postgres's
    assert h.client.artifact(rid, "chart.png") == artifacts.CHART

    settings = h.settings.with_(users=str(users))
    with TestClient(create_app(settings), base_url="http://127.0.0.1") as tc:
        got = tc.get(
            f"/api/runs/{rid}/artifact?name=chart.png",
            headers={"Authorization": f"Bearer {olga}"},
            follow_redirects=False,
        )
    assert got.status_code == 307, got.text
    signed = got.headers["location"]
    assert signed.startswith(weed.url) and "X-Amz-Signature=" in signed
    assert httpx.get(signed, timeout=10).content == artifacts.CHART
