"""What a run shows, on real Postgres, Redis and worker processes: its state (read with no worker,
after the run, with versions that a replay does not move), its custom events (in order among
outlast's own, exactly once, a reader that reconnects misses none), ``wait_state`` woken by
NOTIFY, and live chunks (async and sync readers, then the durable result)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from outlast._model import Chunk, RunRecord
from outlast.errors import UnknownRun, WaitTimeout
from outlast.producer import AsyncClient, Client
from outlast.testing import HarnessFactory, outlast_harness, outlast_servers
from tests.apps import shows
from tests.conftest import World, wait_for

__all__ = ["outlast_harness", "outlast_servers"]  # the fixtures, without the plugin installed

APP = "tests.apps.shows:app"
IDLE_POLL = 60.0  # a fallback poll this long never wakes a test: only a notification can


async def ended(client: AsyncClient, run_id: str, timeout: float = 60) -> RunRecord:
    run = await client.wait(run_id, timeout=timeout)
    assert run.state == "succeeded", (run.state, run.reason, run.error)
    return run


async def test_state_is_read_with_no_worker_after_the_run_and_keeps_versions(world: World) -> None:
    async with AsyncClient(settings=world.settings()) as client:
        rid = (await client.enqueue("progress", {"steps": 3})).id
        assert await client.state(rid) == {}  # nothing set yet, no worker: read all the same
        world.worker(APP)
        await ended(client, rid)
        world.stop_all()  # no worker: Postgres alone answers
        state = await client.state(rid)
        assert {k: (v.value, v.version) for k, v in state.items()} == {"step": (2, 3), "done": (True, 1)}
        step = await client.state(rid, "step")
        assert step is not None and (step.value, step.version) == (2, 3)
        assert await client.state(rid, "never") is None
        # the state row names the journal entry that set it last
        journal = await client.journal(rid)
        assert journal[step.seq - 1].kind == "state" and journal[step.seq - 1].data["value"] == 2


async def test_a_replay_moves_no_version_and_adds_no_event(world: World) -> None:
    """Each durable sleep ends the attempt: every wake-up replays the set_state and emit before it."""
    async with AsyncClient(settings=world.settings()) as client:
        rid = (await client.enqueue("progress", {"steps": 3, "nap": 0.2})).id
        world.worker(APP)
        await ended(client, rid)
        kinds = [e["kind"] for e in await client.events(rid)]
        assert kinds.count("waiting") == 3, kinds  # woken three times: replayed each time
        assert kinds.count("custom:step") == 3, kinds
        step = await client.state(rid, "step")
        assert step is not None and step.version == 3
        assert world.sql("SELECT count(*) FROM journal WHERE run_id = %s AND kind = 'state'", rid) == [(4,)]


async def test_custom_events_come_in_order_among_outlasts_own(world: World) -> None:
    async with AsyncClient(settings=world.settings()) as client:
        rid = (await client.enqueue("progress", {"steps": 3})).id
        world.worker(APP)
        await ended(client, rid)
        events = await client.events(rid)
        ids = [e["id"] for e in events]
        assert ids == sorted(ids)
        custom = [e for e in events if e["kind"].startswith("custom:")]
        assert [(e["kind"], e["detail"]["data"]) for e in custom] == [
            ("custom:step", {"i": i}) for i in range(3)
        ]
        assert [e["detail"]["op"] for e in custom] == ["op-2", "op-5", "op-8"]
        kinds = [e["kind"] for e in events]
        assert kinds[-1] == "succeeded" and kinds.index("custom:step") > 0
        # outlast's own kinds never hold a colon: a custom one cannot pass for one of them
        assert all(":" not in k for k in kinds if not k.startswith("custom:"))


async def test_a_follower_that_reconnects_with_the_last_id_misses_nothing(world: World) -> None:
    async with AsyncClient(settings=world.settings()) as client:
        rid = (await client.enqueue("progress", {"steps": 6, "pause": 0.15})).id
        world.worker(APP)
        seen: list[dict[str, object]] = []
        while True:  # connect, read two events, drop the connection; again from the last id
            after = int(seen[-1]["id"]) if seen else 0  # type: ignore[call-overload]
            follower = client.follow(rid, after=after, poll=IDLE_POLL)
            got = 0
            async for event in follower:
                seen.append(event)
                got += 1
                if got == 2:
                    break
            await follower.aclose()
            if got < 2:
                break
        every = await client.events(rid)
        assert [e["id"] for e in seen] == [e["id"] for e in every]
        assert [e["kind"] for e in seen].count("custom:step") == 6


async def test_wait_state_is_woken_by_postgres_for_each_newer_version(world: World) -> None:
    async with AsyncClient(settings=world.settings()) as client:
        rid = (await client.enqueue("progress", {"steps": 4, "pause": 0.5, "emit": False})).id
        world.worker(APP)
        first = await client.wait_state(rid, "step", timeout=30, poll=IDLE_POLL)
        assert first.version >= 1
        started = time.monotonic()
        newer = await client.wait_state(rid, "step", after_version=first.version, timeout=30, poll=IDLE_POLL)
        assert newer.version == first.version + 1 and newer.value == newer.version - 1
        assert time.monotonic() - started < 5  # woken by its NOTIFY, not the 60 s poll
        done = await client.wait_state(rid, "done", timeout=30, poll=IDLE_POLL)
        assert done.value is True
        await ended(client, rid)
        with pytest.raises(WaitTimeout, match=f"run '{rid}': state 'step' has no version after 4"):
            await client.wait_state(rid, "step", after_version=4, timeout=30)
        world.stop_all()
        other = (await client.enqueue("quiet", {})).id  # queued, no worker: it waits for nothing
        with pytest.raises(WaitTimeout, match=r"after 0\.3s"):
            await client.wait_state(other, "step", timeout=0.3)


async def test_what_cannot_be_shown_is_refused_in_one_line_naming_the_run(world: World) -> None:
    async with AsyncClient(settings=world.settings()) as client:
        with pytest.raises(UnknownRun):
            await client.state("no-such-run")
        runs = {
            what: (await client.enqueue("refused", {"what": what})).id
            for what in ("kind", "key", "value", "chunk")
        }
        world.worker(APP)
        said = {
            "kind": "an event kind is 1 to 100 letters",
            "key": "a state key is a text of 1 to 200",
            "value": "set_state('k') at op-1: the value holds NaN",
            "chunk": "stream(): the chunk is over 65536 bytes",
        }
        for what, rid in runs.items():
            run = await client.wait(rid, timeout=60)
            assert run.state == "failed" and run.reason is not None, run
            assert f"run '{rid}'" in run.reason and said[what] in run.reason, run.reason
            assert "\n" not in run.reason
        assert world.sql("SELECT count(*) FROM run_state") == [(0,)]


async def test_live_chunks_reach_an_async_reader_then_the_result(world: World, tmp_path: Path) -> None:
    go, hold = tmp_path / "go", tmp_path / "hold"
    async with AsyncClient(settings=world.settings()) as client:
        rid = (await client.enqueue("talk", {"n": 4, "wait_for": str(go), "hold": str(hold)})).id
        world.worker(APP)
        items: list[Chunk | RunRecord] = []
        stream = client.stream(rid, block=0.5)
        go.touch()  # the workflow streams; the reader gets the chunks kept, then the rest as they come
        while len(items) < 4:
            items.append(await asyncio.wait_for(anext(stream), 30))
        assert (await client.status(rid)).state == "running"  # live: the run has not gone past them
        hold.touch()
        items += [item async for item in stream]
        chunks = [i for i in items if isinstance(i, Chunk)]
        assert [c.data for c in chunks] == [f"w{i}" for i in range(4)] + [f"t{i}" for i in range(4)] + [
            {"i": i} for i in range(4)
        ]
        assert [c.op for c in chunks] == [None] * 4 + ["op-1"] * 4 + ["op-2"] * 4
        last = items[-1]
        assert isinstance(last, RunRecord) and last.state == "succeeded" and last.result == "over"


def test_a_late_sync_reader_gets_the_recent_chunks_then_the_result(world: World) -> None:
    with Client(settings=world.settings()) as client:
        rid = client.enqueue("talk", {"n": 3}).id
        world.worker(APP)
        wait_for(lambda: client.status(rid).final, 60, 0.1, "the run to end")
        items = list(client.stream(rid))
        assert [i.data for i in items[:-1] if isinstance(i, Chunk)][:3] == ["w0", "w1", "w2"]
        assert len(items) == 10 and isinstance(items[-1], RunRecord)


async def test_a_run_that_does_not_stream_leaves_nothing_in_redis(world: World) -> None:
    async with AsyncClient(settings=world.settings()) as client:
        quiet = (await client.enqueue("quiet", {})).id
        world.worker(APP)
        await ended(client, quiet)
        talk = (await client.enqueue("talk", {"n": 1})).id
        await ended(client, talk)
        keys = set(world.redis().scan_iter(f"{world.prefix}:live:*"))
        assert keys == {f"{world.prefix}:live:{{{talk}}}"}
        assert 0 < world.redis().ttl(f"{world.prefix}:live:{{{talk}}}") <= 300


def test_the_testing_kit_reads_state_events_and_chunks(
    outlast_harness: HarnessFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = outlast_harness(shows.app)
    h.sql("CREATE TABLE executions (id serial PRIMARY KEY, run_id text, what text)")
    monkeypatch.setenv("OUTLAST_DATABASE_URL", h.database_url)
    monkeypatch.setenv("OUTLAST_SCHEMA", h.schema)
    h.start_worker()
    progress = h.client.enqueue("progress", {"steps": 2}).id
    talk = h.client.enqueue("talk", {"n": 2}).id
    assert h.wait(progress).state == "succeeded"
    assert h.state(progress) == {"step": 1, "done": True} and h.state(progress, "step") == 1
    assert h.emitted(progress) == [("step", {"i": 0}), ("step", {"i": 1})]
    assert h.stream(talk) == ["w0", "w1", "t0", "t1", {"i": 0}, {"i": 1}]
