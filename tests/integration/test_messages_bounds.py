"""The inbox bounded per channel and per run, through every send path: callbacks and the HTTP API
of a real ``outlast dashboard`` (uvicorn, a process of its own), the client and ``outlast_send``.
A channel that fills (``OUTLAST_MAX_INBOX``: a third party POSTing to a callback) leaves the
run's other channels open; the run as a whole is bounded higher (``OUTLAST_MAX_INBOX_RUN``).
Counted in the ``messages`` rows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx2 as httpx
import psycopg
import pytest

from outlast import Client
from outlast._callbacks import sign
from outlast.errors import MessageRefused
from outlast.identity import add_user
from tests.apps import chat
from tests.conftest import World, wait_for
from tests.dashboard import dashboard_process
from tests.integration.test_waiting import worker

KEY = "k" * 40
BOUNDS = {"max_inbox": 2, "max_inbox_run": 5}


def per_channel(world: World, run_id: str) -> dict[str, int]:
    rows = world.sql("SELECT channel, count(*) FROM messages WHERE run_id = %s GROUP BY channel", run_id)
    return {c: int(n) for c, n in rows}


def test_a_full_channel_leaves_the_others_open_and_the_run_is_bounded(world: World) -> None:
    chat.setup(world.database_url, world.schema)
    with worker(world, chat.app, **BOUNDS):  # its start writes the bounds outlast_send applies
        wait_for(lambda: world.sql("SELECT max_inbox, max_inbox_run FROM send_limits") == [(2, 5)])
    users = world.tmp / "users.toml"
    users.write_text("")
    sam = add_user(users, "sam", ["senders"])
    base = dashboard_process(
        world,
        OUTLAST_USERS=str(users),
        OUTLAST_SECRET_KEY=KEY,
        OUTLAST_MAX_INBOX="2",
        OUTLAST_MAX_INBOX_RUN="5",
    )
    with Client(settings=world.settings(secret_key=KEY, **BOUNDS)) as c:
        run = c.enqueue("converse", {"turns": 1})  # no worker serves it now: nothing is taken
        token = sign(KEY, run.id, "paid", datetime.now(UTC) + timedelta(hours=1))
        with httpx.Client(base_url=base, timeout=10) as http:
            # a third party holding the callback fills its channel, and no more
            hooks = [http.post(f"/callbacks/{token}", json={"n": n}) for n in range(4)]
            assert [h.status_code for h in hooks] == [202, 202, 429, 429], [h.text for h in hooks]
            # the user's reply still goes in (it was refused, 409, while the run counted as one)
            reply = f"/api/runs/{run.id}/messages/reply"
            auth = {"Authorization": f"Bearer {sam}"}
            sent = [http.post(reply, json={"text": t}, headers=auth) for t in ("a", "b", "c")]
            assert [s.status_code for s in sent] == [201, 201, 409], [s.text for s in sent]
            assert "2 messages already wait untaken on this channel" in sent[2].json()["error"]
        c.send(run.id, "in", 1)  # the fifth: the run's bound
        with pytest.raises(MessageRefused, match="5 messages already wait untaken in the run") as e:
            c.send(run.id, "other", 1)
        assert e.value.refusal == "full"
    with psycopg.connect(world.database_url, options=f"-c search_path={world.schema}") as tx:
        with pytest.raises(psycopg.errors.CheckViolation, match="untaken in the run"):
            tx.execute("SELECT * FROM outlast_send(%s, 'sql', '1'::jsonb)", (run.id,))
    assert per_channel(world, run.id) == {"paid": 2, "reply": 2, "in": 1}
