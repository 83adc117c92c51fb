"""``OUTLAST_LOG_PAYLOADS``: off (the default), no worker log line carries a tool's arguments or
result; on, ``operation.dispatched`` carries the arguments as journaled (secret ones sealed) and
``operation.returned`` the result as journaled. A real worker process, real Postgres and Redis."""

from __future__ import annotations

import uuid

import pytest

from outlast import Client
from tests.conftest import World
from tests.crash import settled
from tests.integration.test_secrets import APP, secret_world


@pytest.mark.parametrize("payloads", ["off", "on"])
def test_log_lines_carry_payloads_only_when_asked(world: World, payloads: str) -> None:
    secret = f"sk-live-{uuid.uuid4().hex}"
    client = Client(settings=world.settings())
    try:
        rid = client.enqueue("charge", {"who": "alice", "amount": 5}).id
        world.worker(APP, **secret_world(world, secret, OUTLAST_LOG_PAYLOADS=payloads))
        assert settled(client, rid).state == "succeeded"
    finally:
        client.close()
    logs = world.logs()
    assert secret not in logs  # sealed or left out, never in clear
    assert world.logged("run.finished", run_id=rid, state="succeeded")
    pays = [e for e in world.logged("operation.dispatched", run_id=rid) if "amount" in e["args"]]
    paid = [
        e
        for e in world.logged("operation.returned", run_id=rid)
        if e["result"] == {"paid": 5, "with": "right key"}
    ]
    if payloads == "off":
        assert not world.logged("operation.dispatched") and not world.logged("operation.returned")
        assert '"args"' not in logs and '"result"' not in logs
    else:
        assert len(pays) == 1 and pays[0]["args"]["amount"] == 5, pays
        assert pays[0]["args"]["api_key"]["secret"].startswith("hmac-sha256:"), pays
        assert len(paid) == 1 and paid[0]["operation_id"] == pays[0]["operation_id"], paid
