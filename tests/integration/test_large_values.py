"""Large values outside the journal: a message past ``OUTLAST_MAX_PAYLOAD`` is a value of the
payload store, its ``messages`` row holding the reference, read back whole by the run that takes it
(through a real worker process) and wherever messages are shown; the take's journal entry holds
the reference too. The sweep keeps what an untaken message refers to; past
``OUTLAST_MAX_REFERENCED`` a send is refused naming the run, the channel and the setting; a small
message stays inline, byte for byte."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from outlast import AsyncClient, Client, _bundle as bundle
from outlast._bundle import export
from outlast._callbacks import sign
from outlast._payloads import REFS
from outlast.dashboard import create_app
from outlast.errors import InvalidInput
from outlast.identity import add_user
from outlast.testing.worker import run_blocking
from outlast.web import Callbacks
from tests.apps.payloads import text_of
from tests.conftest import World

APP = "tests.apps.payloads:app"
MiB = 1024 * 1024


def test_a_message_of_5_mib_goes_through_the_payload_store_to_the_run_that_takes_it(world: World) -> None:
    text = text_of("m", 5 * MiB)
    with Client(settings=world.settings()) as client:
        rid = client.enqueue("inbox").id
        client.send(rid, "in", {"text": text})
        (row,) = world.sql("SELECT payload::text FROM messages WHERE run_id = %s", rid)
        assert row[0].startswith('{"' + REFS) and len(row[0]) < 200  # the row holds the reference
        ((sha, size),) = world.sql("SELECT sha256, size FROM payloads WHERE run_id = %s", rid)
        assert size > 5 * MiB and sha in row[0]
        world.sweep_payloads()  # untaken, past the grace: kept, as the message refers to it
        assert world.sql("SELECT count(*) FROM payloads WHERE run_id = %s", rid) == [(1,)]

        world.worker(APP)
        done = client.wait(rid, timeout=60)
        assert done.state == "succeeded" and done.result == {"length": 5 * MiB, "same": 1, "told": 100}
        taken = [
            b for (b,) in world.sql("SELECT body FROM journal WHERE run_id = %s AND kind = 'message'", rid)
        ]
        assert len(taken) == 1 and taken[0].startswith('{"' + REFS) and sha in taken[0]
        assert world.sql("SELECT count(*) FROM payloads WHERE run_id = %s", rid) == [(1,)]  # stored once
        assert [m["payload"]["text"] == text for m in client.messages(rid)] == [True]  # shown whole
        assert client.verify(rid) is None


def test_a_message_past_the_referenced_limit_is_refused_naming_the_run_the_channel_and_the_setting(
    world: World,
) -> None:
    with Client(settings=world.settings(max_payload=4096, max_referenced=50_000)) as client:
        rid = client.enqueue("inbox").id
        with pytest.raises(InvalidInput) as refused:
            client.send(rid, "in", {"text": text_of("m", 60_000)})
        said = str(refused.value)
        assert f"run '{rid}', channel 'in'" in said and "OUTLAST_MAX_REFERENCED" in said and "\n" not in said
        assert world.sql("SELECT count(*) FROM messages") == [(0,)]
        assert world.sql("SELECT count(*) FROM payloads") == [(0,)]


def test_a_small_message_stays_inline_and_one_that_reads_as_a_reference_is_still_itself(world: World) -> None:
    small = {"text": text_of("s", 1000)}
    tricky = {REFS: {"payload": {"sha256": "0" * 64, "size": 1, "media_type": "application/json"}}}
    with Client(settings=world.settings()) as client:
        rid = client.enqueue("inbox").id
        client.send(rid, "in", small, message_id="small")
        ((inline,),) = world.sql("SELECT payload FROM messages WHERE run_id = %s", rid)
        assert inline == small and world.sql("SELECT count(*) FROM payloads") == [(0,)]
        other = client.enqueue("inbox").id
        client.send(other, "in", tricky)
        assert [m["payload"] for m in client.messages(other)] == [tricky]
        assert world.sql("SELECT count(*) FROM payloads WHERE run_id = %s", other) == [(1,)]


def test_an_input_of_10_mib_goes_through_the_payload_store_to_the_worker_and_every_reader(
    world: World,
) -> None:
    text = text_of("i", 10 * MiB)
    with Client(settings=world.settings()) as client:
        rid = client.enqueue("big_input", {"text": text}, run_id="big").id
        ((held,),) = world.sql("SELECT input::text FROM runs WHERE id = %s", rid)
        assert held.startswith('{"' + REFS) and len(held) < 200  # the row holds the reference
        ((sha, size),) = world.sql("SELECT sha256, size FROM payloads WHERE run_id = %s", rid)
        assert size > 10 * MiB and sha in held
        assert client.enqueue("big_input", {"text": text}, run_id="big").id == rid  # idempotent, as inline
        world.sweep_payloads()  # past the grace: kept, as the run's input refers to it
        assert world.sql("SELECT count(*) FROM payloads WHERE run_id = %s", rid) == [(1,)]

        world.worker(APP)
        done = client.wait(rid, timeout=60)
        assert done.state == "succeeded" and done.result == {"length": 10 * MiB, "same": 1, "told": 100}
        assert client.status(rid).input == {"text": text}  # shown whole
        assert client.verify(rid) is None

    # The run's page cuts it, saying where it is whole: a page of 10 MiB helps no one.
    users = world.tmp / "users.toml"
    auth = {"Authorization": f"Bearer {add_user(users, 'vera', ['viewers'])}"}
    with TestClient(create_app(world.settings(users=str(users))), base_url="http://127.0.0.1") as http:
        page = http.get(f"/runs/{rid}", headers=auth)
    assert page.status_code == 200 and len(page.text) < 100_000, len(page.text)
    assert f"more characters: whole in outlast status {rid} --json" in page.text


def test_an_input_past_the_referenced_limit_is_refused_naming_the_workflow_and_the_setting(
    world: World,
) -> None:
    with Client(settings=world.settings(max_payload=4096, max_referenced=50_000)) as client:
        with pytest.raises(InvalidInput) as refused:
            client.enqueue("big_input", {"text": text_of("i", 60_000)})
        said = str(refused.value)
        assert "a run of 'big_input'" in said and "OUTLAST_MAX_REFERENCED" in said and "\n" not in said
        assert world.sql("SELECT count(*) FROM runs") == [(0,)]
        small = client.enqueue("big_input", {"text": "x"}).id  # a small input: inline, byte for byte
        assert world.sql("SELECT input FROM runs WHERE id = %s", small) == [({"text": "x"},)]
        assert world.sql("SELECT count(*) FROM payloads") == [(0,)]


def test_a_result_of_10_mib_is_held_by_reference_and_every_reader_gets_it_whole(
    world: World, tmp_path: Path
) -> None:
    with Client(settings=world.settings()) as client:
        rid = client.enqueue("big_result", {"size": 10 * MiB}).id
        world.worker(APP)
        done = client.wait(rid, timeout=60)
        assert done.state == "succeeded" and done.result == {"text": text_of("r", 10 * MiB)}
        ((held,),) = world.sql("SELECT result::text FROM runs WHERE id = %s", rid)
        assert held.startswith('{"' + REFS) and len(held) < 200  # the row holds the reference
        world.sweep_payloads()  # past the grace: kept, as the run's result refers to it
        assert world.sql("SELECT count(*) FROM payloads WHERE run_id = %s", rid) == [(1,)]
        assert client.status(rid).result == done.result

    async def exported() -> None:
        async with AsyncClient(settings=world.settings()) as c:
            await export(c, rid, tmp_path / "bundle")

    run_blocking(exported)
    record, _ = bundle.read(tmp_path / "bundle")
    assert record.result == done.result  # the debug bundle carries it whole


def test_a_result_past_the_referenced_limit_fails_the_run_naming_it_and_the_setting(world: World) -> None:
    with Client(settings=world.settings()) as client:
        rid = client.enqueue("big_result", {"size": 60_000}).id
        world.worker(APP, OUTLAST_MAX_PAYLOAD="4096", OUTLAST_MAX_REFERENCED="50000")
        done = client.wait(rid, timeout=60)
        said = f"{done.reason} {done.error}"
        assert done.state == "failed" and "OUTLAST_MAX_REFERENCED" in said, said
        assert f"run '{rid}': the result of workflow 'big_result'" in said
        assert world.sql("SELECT count(*) FROM payloads") == [(0,)]


def test_a_state_value_and_an_event_of_10_mib_are_held_by_reference_and_read_back_whole(
    world: World, tmp_path: Path
) -> None:
    size = 10 * MiB
    with Client(settings=world.settings()) as client:
        rid = client.enqueue("big_shown", {"size": size}).id
        world.worker(APP)
        done = client.wait(rid, timeout=60)
        assert done.state == "succeeded", (done.reason, done.error)
        state_of = "SELECT value::text FROM run_state WHERE run_id = %s AND key = %s"
        ((value,),) = world.sql(state_of, rid, "report")
        ((data,),) = world.sql("SELECT (detail->'data')::text FROM events WHERE kind = 'custom:report'")
        for held in (value, data):  # the rows hold the references
            assert held.startswith('{"' + REFS) and len(held) < 200
        assert world.sql(state_of, rid, "small") == [('{"n": 1}',)]
        world.sweep_payloads()  # past the grace: kept, as their journal entries refer to them
        assert world.sql("SELECT count(*) FROM payloads WHERE run_id = %s", rid) == [(2,)]
        state = client.state(rid)
        assert state["report"].value == {"text": text_of("s", size)} and state["small"].value == {"n": 1}
        assert client.wait_state(rid, "report").value == {"text": text_of("s", size)}
        (event,) = [e for e in client.events(rid) if e["kind"] == "custom:report"]
        assert event["detail"]["data"] == {"text": text_of("e", size)}
        assert client.verify(rid) is None

    async def exported() -> None:
        async with AsyncClient(settings=world.settings()) as c:
            await export(c, rid, tmp_path / "bundle")

    run_blocking(exported)
    lines = [json.loads(line) for line in (tmp_path / "bundle" / "events.jsonl").read_text().splitlines()]
    (kept,) = [e for e in lines if e["kind"] == "custom:report"]
    assert kept["detail"]["data"] == {"text": text_of("e", size)}  # the debug bundle carries it whole

    users = world.tmp / "users.toml"
    auth = {"Authorization": f"Bearer {add_user(users, 'vera', ['viewers'])}"}
    with TestClient(create_app(world.settings(users=str(users))), base_url="http://127.0.0.1") as http:
        page = http.get(f"/runs/{rid}", headers=auth)
    assert page.status_code == 200 and len(page.text) < 100_000, len(page.text)
    assert "s" * 63 in page.text and "e" * 63 in page.text and REFS not in page.text  # cut, but the values


def test_a_state_value_past_the_referenced_limit_fails_the_run_naming_it_and_the_setting(
    world: World,
) -> None:
    with Client(settings=world.settings()) as client:
        rid = client.enqueue("big_shown", {"size": 60_000}).id
        world.worker(APP, OUTLAST_MAX_PAYLOAD="4096", OUTLAST_MAX_REFERENCED="50000")
        done = client.wait(rid, timeout=60)
        said = f"{done.reason} {done.error}"
        assert done.state == "failed" and "OUTLAST_MAX_REFERENCED" in said and "\n" not in said, said
        assert f"run '{rid}': set_state('report')" in said
        assert world.sql("SELECT count(*) FROM payloads") == [(0,)]


def test_an_input_of_10_mib_carried_forward_is_held_by_reference_and_read_back_whole(world: World) -> None:
    size = 10 * MiB
    with Client(settings=world.settings()) as client:
        rid = client.enqueue("big_carry", {"size": size}).id
        world.worker(APP)
        done = client.wait(rid, timeout=60)
        assert done.state == "succeeded" and done.result == {"length": size, "same": 1, "told": 100}
        ((held, first),) = world.sql("SELECT carried::text, input FROM runs WHERE id = %s", rid)
        assert held.startswith('{"' + REFS) and len(held) < 200 and first == {"size": size}
        ((sha, stored),) = world.sql("SELECT sha256, size FROM payloads WHERE run_id = %s", rid)
        assert stored > size and sha in held
        world.sweep_payloads()  # past the grace: kept, as the run's carried input refers to it
        assert world.sql("SELECT count(*) FROM payloads WHERE run_id = %s", rid) == [(1,)]
        assert client.status(rid).input == {"size": size, "text": text_of("c", size)}  # shown whole
        assert [g["input"] for g in client.generations(rid)] == [
            {"size": size},
            {"size": size, "text": text_of("c", size)},
        ]
        assert client.verify(rid) is None


def test_an_input_carried_forward_past_the_referenced_limit_fails_the_run_naming_it_and_the_setting(
    world: World,
) -> None:
    with Client(settings=world.settings()) as client:
        rid = client.enqueue("big_carry", {"size": 60_000}).id
        world.worker(APP, OUTLAST_MAX_PAYLOAD="4096", OUTLAST_MAX_REFERENCED="50000")
        done = client.wait(rid, timeout=60)
        said = f"{done.reason} {done.error}"
        assert done.state == "failed" and "OUTLAST_MAX_REFERENCED" in said and "\n" not in said, said
        assert f"run '{rid}': carry_forward at" in said
        assert world.sql("SELECT count(*) FROM payloads") == [(0,)]


def test_a_child_input_of_10_mib_is_held_by_reference_in_the_child_row_and_read_back_whole(
    world: World,
) -> None:
    size = 10 * MiB
    with Client(settings=world.settings()) as client:
        rid = client.enqueue("big_child", {"size": size}).id
        world.worker(APP)
        done = client.wait(rid, timeout=60)
        assert done.state == "succeeded" and done.result == {"length": size, "same": 1, "told": 100}
        ((child, held),) = world.sql("SELECT id, input::text FROM runs WHERE started_by = %s", rid)
        assert held.startswith('{"' + REFS) and len(held) < 200  # the child's row holds the reference
        ((sha, stored),) = world.sql("SELECT sha256, size FROM payloads WHERE run_id = %s", child)
        assert stored > size and sha in held
        world.sweep_payloads()  # past the grace: kept, as the child's input refers to it
        assert world.sql("SELECT count(*) FROM payloads WHERE run_id = %s", child) == [(1,)]
        assert client.status(child).input == {"text": text_of("i", size)}  # shown whole
        assert client.verify(rid) is None and client.verify(child) is None


def test_a_child_input_past_the_referenced_limit_fails_the_parent_naming_it_and_the_setting(
    world: World,
) -> None:
    with Client(settings=world.settings()) as client:
        rid = client.enqueue("big_child", {"size": 60_000}).id
        world.worker(APP, OUTLAST_MAX_PAYLOAD="4096", OUTLAST_MAX_REFERENCED="50000")
        done = client.wait(rid, timeout=60)
        said = f"{done.reason} {done.error}"
        assert done.state == "failed" and "OUTLAST_MAX_REFERENCED" in said and "\n" not in said, said
        assert f"run '{rid}'," in said and "child run of 'big_input'" in said
        assert world.sql("SELECT count(*) FROM runs") == [(1,)] and world.sql(
            "SELECT count(*) FROM payloads"
        ) == [(0,)]


def _asked(client: Client, rid: str) -> str:
    for _ in range(300):
        if pending := client.requests(rid):
            return str(pending[0]["id"])
        time.sleep(0.1)
    raise AssertionError(f"run {rid} asked nothing")


def test_an_answer_of_10_mib_is_held_by_reference_in_the_request_row_and_read_back_whole(
    world: World,
) -> None:
    size = 10 * MiB
    answer = {"text": text_of("a", size)}
    with Client(settings=world.settings()) as client:
        rid = client.enqueue("big_answer").id
        world.worker(APP)
        op = _asked(client, rid)
        assert client.respond(rid, op, answer, by="vera").again is False
        ((held,),) = world.sql("SELECT answer::text FROM requests WHERE run_id = %s", rid)
        assert held.startswith('{"' + REFS) and len(held) < 200  # the row holds the reference
        assert client.respond(rid, op, answer, by="vera").again is True  # the same answer again
        done = client.wait(rid, timeout=60)
        assert done.state == "succeeded" and done.result == {"length": size, "same": 1, "told": 100}
        world.sweep_payloads()  # past the grace: kept, as the request's answer refers to it
        assert world.sql("SELECT count(*) FROM payloads WHERE run_id = %s", rid) == [(1,)]  # stored once
        assert [r["answer"] == answer for r in client.requests(rid, pending=False)] == [True]  # whole
        assert client.verify(rid) is None

    users = world.tmp / "users.toml"
    auth = {"Authorization": f"Bearer {add_user(users, 'vera', ['viewers'])}"}
    with TestClient(create_app(world.settings(users=str(users))), base_url="http://127.0.0.1") as http:
        page = http.get(f"/runs/{rid}", headers=auth)
    assert page.status_code == 200 and len(page.text) < 100_000, len(page.text)  # cut for display


def test_an_answer_past_the_referenced_limit_is_refused_naming_the_run_the_request_and_the_setting(
    world: World,
) -> None:
    with Client(settings=world.settings(max_payload=4096, max_referenced=50_000)) as client:
        rid = client.enqueue("big_answer").id
        world.worker(APP)
        op = _asked(client, rid)
        with pytest.raises(InvalidInput) as refused:
            client.respond(rid, op, {"text": text_of("a", 60_000)}, by="vera")
        said = str(refused.value)
        assert f"run '{rid}', request {op}" in said and "OUTLAST_MAX_REFERENCED" in said and "\n" not in said
        assert world.sql("SELECT count(*) FROM payloads") == [(0,)]


def test_a_message_of_5_mib_sent_through_a_callback_url_goes_through_the_payload_store(
    world: World,
) -> None:
    key = "kA7-qc3Rz0vN1uWd6yXe9mTp2sLb5hGf8jHo4iK"
    text = text_of("m", 5 * MiB)
    with Client(settings=world.settings()) as client:
        rid = client.enqueue("inbox").id
        token = sign(key, rid, "in", datetime.now(UTC) + timedelta(hours=1))
        with TestClient(
            Callbacks(settings=world.settings(secret_key=key)), base_url="http://127.0.0.1"
        ) as http:
            assert http.post(f"/{token}", json={"text": text}).status_code == 202
        ((held,),) = world.sql("SELECT payload::text FROM messages WHERE run_id = %s", rid)
        assert held.startswith('{"' + REFS) and len(held) < 200  # the row holds the reference
        world.worker(APP)
        done = client.wait(rid, timeout=60)
        assert done.state == "succeeded" and done.result == {"length": 5 * MiB, "same": 1, "told": 100}
        other = client.enqueue("inbox").id

    small = world.settings(secret_key=key, max_payload=4096, max_referenced=50_000)
    token = sign(key, other, "in", datetime.now(UTC) + timedelta(hours=1))
    with TestClient(Callbacks(settings=small), base_url="http://127.0.0.1") as http:
        refused = http.post(f"/{token}", json={"text": text_of("m", 60_000)})
    assert refused.status_code == 413  # a callback's answer names no run: its token shows it
    assert world.sql("SELECT count(*) FROM messages WHERE run_id = %s", other) == [(0,)]
