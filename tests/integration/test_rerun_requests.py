"""Typed requests' writes are safe to re-run (as tests/integration/test_rerun.py checks every
other step): a request's wait, the first answer, a request of a ``run.first`` and its wait, each
sent again after a lost acknowledgement, find their own effect and take effect once."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import World
from tests.integration.test_rerun import ack_lost, claimed, events, opened

ASKED: dict[str, Any] = {
    "name": "decide",
    "payload": {"draft": "d"},
    "response_schema": {"type": "integer"},
    "responders": ["ann"],
    "expires_in": None,
}


async def test_a_request_sent_again_waits_once_and_its_answer_stands_once(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await opened(world)
    try:
        token = await claimed(store, "r")
        with ack_lost(monkeypatch, "await_request") as lost:
            assert await store.requests.await_request("r", token, "op-1", **ASKED)
        assert lost.first == [[{"run_id": "r"}]]
        assert world.sql("SELECT state, reason FROM runs WHERE id = 'r'") == [("waiting", "request")]
        assert world.sql("SELECT count(*) FROM requests") == [(1,)]
        assert events(world, "r", "waiting") == 1

        who = {"principal": "ann", "how": "cli"}
        with ack_lost(monkeypatch, "answer_request") as lost:
            got = await store.requests.answer_request("r", "op-1", 3, "ann", who)
        assert lost.first == [[{"run_id": "r", "queue": "default"}]]
        assert got == (True, "default")
        assert world.sql("SELECT status, answer, answered_by FROM requests") == [("answered", 3, "ann")]
        assert world.sql("SELECT state FROM runs WHERE id = 'r'") == [("queued",)]
        assert events(world, "r", "answered") == 1
        assert await store.requests.answer_request("r", "op-1", 4, "ann", who) == (False, None)
    finally:
        await store.close()


async def test_a_first_of_several_waits_sent_again_publishes_and_waits_once(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await opened(world)
    try:
        token = await claimed(store, "r")
        with ack_lost(monkeypatch, "publish_request") as lost:
            held, expires = await store.requests.publish_request(
                "r", token, "op-1", **{**ASKED, "expires_in": 60.0}
            )
        assert held and expires is not None and lost.first == [[{"expires_at": expires}]]
        assert world.sql("SELECT count(*), min(status) FROM requests") == [(1, "pending")]
        detail = {"reason": "first", "ops": ["op-1", "op-2"]}
        with ack_lost(monkeypatch, "wait_first") as lost:
            assert await store.firsts.wait_first(
                "r", token, state="waiting", wake_at=expires, child=None, detail=detail
            )
        assert lost.first == [[{"run_id": "r"}]]
        assert world.sql("SELECT state, reason, wake_at = %s FROM runs WHERE id = 'r'", expires) == [
            ("waiting", "first", True)
        ]
        assert events(world, "r", "waiting") == 1
        # Answered, it wakes the run waiting on the first of its waits.
        assert await store.requests.answer_request("r", "op-1", 3, "ann", {"principal": "ann"}) == (
            True,
            "default",
        )
        assert not (await store.requests.publish_request("r", token - 1, "op-9", **ASKED))[0]  # fenced
    finally:
        await store.close()
