"""A new run's id is in the safe set (1 to 200 printable characters, no '/' or '\\', not '.' or
'..'): another is refused at enqueue before anything is written, naming the id and the rule. A run
recorded under such an id before the rule keeps working: read, re-enqueued (idempotent), cancelled."""

from __future__ import annotations

import pytest

from outlast._model import RunState
from outlast.errors import InvalidInput
from outlast.producer import AsyncClient
from tests.conftest import World

UNSAFE = ["a/b", "../etc", "/", "a\\b", ".", ".."]


def written(world: World) -> tuple[int, int]:
    """Run rows, and stream entries of the default queue (every level)."""
    rows = world.sql("SELECT count(*) FROM runs")[0][0]
    r = world.redis()
    entries = sum(r.xlen(k) for k in r.scan_iter(f"{world.prefix}*default*") if r.type(k) == "stream")
    return rows, entries


@pytest.mark.parametrize("run_id", UNSAFE)
async def test_a_new_run_id_outside_the_safe_set_is_refused_naming_it_and_the_rule(
    world: World, run_id: str
) -> None:
    async with AsyncClient(settings=world.settings()) as c:
        with pytest.raises(InvalidInput) as refused:
            await c.enqueue("squares", {"n": 1}, run_id=run_id)
    said = str(refused.value)
    assert repr(run_id) in said
    assert "without '/' or '\\'" in said and "not '.' or '..'" in said
    assert written(world) == (0, 0)


async def test_one_unsafe_id_in_a_batch_writes_nothing_and_a_continuation_is_held_to_the_rule(
    world: World,
) -> None:
    async with AsyncClient(settings=world.settings()) as c:
        with pytest.raises(InvalidInput, match="'b/1'"):
            await c.enqueue_many("squares", [{"n": 1}, {"n": 2}], run_ids=["a-1", "b/1"])
        assert written(world) == (0, 0)
        ok = await c.enqueue("squares", {"n": 1}, run_id="order:42.v1")  # '.' and ':' inside are fine
        assert (await c.enqueue("squares", {"n": 1}, run_id="...")).id == "..."
        assert written(world) == (2, 2)  # what is counted as written is seen
        await c.cancel(ok.id)
        with pytest.raises(InvalidInput, match="'next/1'"):
            await c.continue_run(ok.id, run_id_new="next/1")
    assert world.sql("SELECT id FROM runs ORDER BY id") == [("...",), ("order:42.v1",)]


async def test_a_run_recorded_before_the_rule_keeps_working(world: World) -> None:
    async with AsyncClient(settings=world.settings()) as c:
        await c.store.runs.insert_run(  # as an older outlast recorded it
            id="legacy/1", workflow="squares", queue="default", input={"n": 1}, input_hash="h",
            program=None, deadline_in=None,
        )  # fmt: skip
        again = await c.enqueue("squares", {"n": 1}, run_id="legacy/1")  # idempotent: the same run
        assert (again.id, again.state) == ("legacy/1", RunState.QUEUED)
        assert (await c.status("legacy/1")).id == "legacy/1"
        assert [e["kind"] for e in await c.events("legacy/1")] == ["enqueued"]
        assert (await c.cancel("legacy/1")).state == RunState.CANCELLED


def test_the_cli_refuses_an_unsafe_new_id_in_one_line(world: World) -> None:
    p = world.cli("enqueue", "squares", "--run-id", "../x")
    assert p.returncode == 2
    assert p.stderr.count("\n") == 1 and "'../x'" in p.stderr and "'/'" in p.stderr
    assert written(world) == (0, 0)
