"""Settings, failpoints, tool argument validation and the queue layer (fakeredis)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from typing import Any, cast

import fakeredis
import pytest

from outlast import App, InvalidInput
from outlast._failpoints import arm, hit
from outlast.queue import Queue
from outlast.settings import Settings
from outlast.store import redact
from outlast.store.notify import RunWatch
from outlast.worker.tools import invoke


def test_settings_read_once_from_env_with_overrides() -> None:
    s = Settings.from_env({"OUTLAST_LEASE_TTL": "7", "OUTLAST_PREFIX": "p"}, prefix=None, queue="q")
    assert (s.lease_ttl, s.prefix, s.queue, s.database_url) == (7.0, "p", "q", None)


def test_redact_hides_the_password() -> None:
    assert redact("postgresql://u:secret@h:5432/db") == "postgresql://u:***@h:5432/db"
    assert redact("redis://h:6379/0") == "redis://h:6379/0"


def test_unknown_failpoint_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown failpoint"):
        arm("after_lunch")
    arm("")
    hit("after_effect", "transfer")  # inert when nothing is armed


def test_armed_failpoint_kills_the_process_for_its_tool_only() -> None:
    code = (
        "from outlast._failpoints import arm, hit\n"
        "arm('after_effect:transfer')\n"
        "hit('after_effect', 'notify')\n"
        "print('survived notify', flush=True)\n"
        "hit('after_effect', 'transfer')\n"
        "print('unreachable')\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ))
    assert p.returncode == -signal.SIGKILL
    assert "survived notify" in p.stdout and "unreachable" not in p.stdout


def test_tool_arguments_are_validated_from_type_hints() -> None:
    app = App()

    @app.tool("transfer", idempotent=True)
    def transfer(amount: int, to: str, memo: str = "") -> dict[str, int]:
        return {"amount": amount}

    tool = app.get_tool("transfer")
    assert tool.validate({"amount": "5", "to": "bob"}) == {"amount": 5, "to": "bob", "memo": ""}
    with pytest.raises(InvalidInput, match="to: Field required"):
        tool.validate({"amount": 5})
    with pytest.raises(InvalidInput, match="invalid call to tool 'transfer'"):
        tool.validate({"amount": 5, "to": "bob", "extra": 1})


def test_workflow_identity_changes_with_its_code() -> None:
    a, b = App(), App()

    @a.workflow("w", version="1")
    async def w1(run: object) -> int:
        return 1

    @b.workflow("w", version="1")
    async def w2(run: object) -> int:
        return 2

    assert a.programs()["w"] != b.programs()["w"]
    assert a.programs()["w"].startswith("1:")


@pytest.fixture
def queue() -> Queue:
    return Queue("redis://fake", "t", client=fakeredis.FakeAsyncRedis(decode_responses=True))


async def test_queue_publish_read_ack(queue: Queue) -> None:
    await queue.publish("default", "r1")  # before any group: still delivered
    await queue.ensure_group("default")
    got = await queue.read("default", "c1", 10, 10)
    assert [d.run_id for d in got] == ["r1"]
    assert await queue.read("default", "c1", 10, 10, own_pending=True) == got
    await queue.ack(got[0])
    assert await queue.read("default", "c1", 10, 10, own_pending=True) == []
    assert await queue.redis.xlen(queue.stream("default")) == 0


async def test_queue_dead_letter_keeps_the_reason(queue: Queue) -> None:
    await queue.ensure_group("default")
    await queue.redis.xadd(queue.stream("default"), {"junk": "1"})
    (d,) = await queue.read("default", "c1", 10, 10)
    assert d.run_id is None
    await queue.dead_letter(d, "unparseable")
    (dead,) = await queue.dead_letters("default")
    assert dead["_reason"] == "unparseable" and dead["junk"] == "1"


async def test_a_timed_out_write_is_never_retried_but_a_read_is() -> None:
    import asyncio

    from outlast import Retry, ToolTimeout

    app = App()
    starts = {"write": 0, "read": 0}

    @app.tool("write", timeout=0.05, retry=Retry(attempts=3, wait=0.01))
    async def write() -> None:
        starts["write"] += 1
        await asyncio.sleep(1)

    @app.tool("read", effect="read", timeout=0.05, retry=Retry(attempts=3, wait=0.01))
    async def read() -> None:
        starts["read"] += 1
        await asyncio.sleep(1)

    for name in starts:
        with pytest.raises(ToolTimeout):
            await invoke(app.get_tool(name), {})
    assert starts == {"write": 1, "read": 3}  # the first write may still be running: once only


async def test_a_watch_cancelled_while_it_registers_closes_its_connection() -> None:
    class Conn:
        closed = False

        async def execute(self, *_: object) -> None:
            await asyncio.sleep(3600)

        async def close(self) -> None:
            self.closed = True

    conn = Conn()

    async def connect() -> Conn:
        return conn

    start = asyncio.create_task(RunWatch(cast(Any, connect), "r1", "ch", 1.0).start())
    await asyncio.sleep(0.05)
    start.cancel()
    with pytest.raises(asyncio.CancelledError):
        await start
    assert conn.closed


async def test_listening_connections_are_capped_and_a_watch_beyond_the_cap_polls() -> None:
    opened: list[object] = []

    class Conn:
        async def execute(self, *_: object) -> None:
            pass

        async def close(self) -> None:
            opened.remove(self)

        async def notifies(self) -> Any:
            await asyncio.sleep(3600)
            yield None

    async def connect() -> Conn:
        conn = Conn()
        opened.append(conn)
        return conn

    slots = asyncio.Semaphore(1)
    first = RunWatch(cast(Any, connect), "r1", "ch1", 0.01, slots)
    second = RunWatch(cast(Any, connect), "r2", "ch2", 0.01, slots)
    await first.start()
    await second.start()
    assert (first.listening, second.listening, len(opened)) == (True, False, 1)
    await second.changed()  # polls: returns after its poll interval, still not listening
    assert not second.listening
    await first.close()
    await second.changed()  # a slot is free: it listens now
    assert (second.listening, len(opened)) == (True, 1)
    await second.close()
    assert opened == []
