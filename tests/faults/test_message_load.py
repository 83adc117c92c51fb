"""Messages under load and kills: R runs, each taking M messages sent by P concurrent producer
processes (a tenth of them sent twice, the same id again), while worker processes are killed with
SIGKILL about every second and restarted. Every run must take exactly its M distinct messages, each
producer's in the order it sent them, and the idempotent tool each message drives must have one
effect per message (tests/apps/chat.py: ``handled``, one row per idempotency key).

The size is ``OUTLAST_MESSAGE_LOAD=R,M,P`` (the requirement's full size: ``500,20,4``); the default is a
size CI runs in well under 90 s. FAULTS_SEED replays a sequence of kills."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from collections import defaultdict

import pytest

from tests.apps import chat
from tests.conftest import ROOT
from tests.faults import FaultWorld, enqueue_many

pytestmark = pytest.mark.crash

APP = "tests.apps.chat:app"
WORKERS = 2
SIZE = os.environ.get("OUTLAST_MESSAGE_LOAD", "100,12,4")

PRODUCER = textwrap.dedent(
    """
    import json, random, sys
    from outlast import Client
    p, messages, producers, path = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    runs = json.load(open(path))
    rng = random.Random(p)
    mine = [i for i in range(messages) if i % producers == p]
    with Client.from_env() as c:
        for i in mine:  # in order, for every run, interleaved with the other producers
            for run_id in runs:
                c.send(run_id, "in", {"p": p, "i": i}, message_id=f"{p}-{i}")
                if rng.random() < 0.1:  # a retry: the same message again
                    assert c.send(run_id, "in", {"p": p, "i": i}, message_id=f"{p}-{i}").duplicate
    """
)


@pytest.mark.timeout(600)
def test_every_run_takes_its_distinct_messages_in_order_under_kills(fw: FaultWorld) -> None:
    runs_n, messages, producers = (int(x) for x in SIZE.split(","))
    seed = int(os.environ.get("FAULTS_SEED") or time.time())
    rng = random.Random(seed)
    print(f"\nFAULTS_SEED={seed} size {runs_n} runs x {messages} messages x {producers} producers")
    chat.setup(fw.database_url, fw.schema)
    args = ("-c", "64", "--lease-ttl", "1")
    # The kills are ours; receives linger as by default, so kills fall on lingering runs too.
    env = {"OUTLAST_LEASE_TTL": "1", "OUTLAST_MAX_ATTEMPTS": "1000", "OUTLAST_RECEIVE_LINGER": "0.5"}
    names = [f"m-{n}" for n in range(WORKERS)]
    procs = {n: fw.worker(APP, *args, OUTLAST_WORKER_NAME=n, **env) for n in names}
    ids = enqueue_many(fw, "converse", [{"turns": messages} for _ in range(runs_n)])
    path = fw.tmp / "runs.json"
    path.write_text(json.dumps(ids))
    began = time.monotonic()
    senders = [
        subprocess.Popen(
            [sys.executable, "-c", PRODUCER, str(p), str(messages), str(producers), str(path)],
            env=fw.env(),
            cwd=ROOT,
        )
        for p in range(producers)
    ]
    kills = 0
    while any(s.poll() is None for s in senders) or fw.settled(ids) < runs_n:
        if time.monotonic() - began > 400:
            break
        time.sleep(rng.uniform(0.6, 1.4))  # about every second
        if (
            fw.sql("SELECT count(*) FROM runs WHERE id = ANY(%s) AND state = 'succeeded'", ids)[0][0]
            == runs_n
        ):
            break
        name = rng.choice(names)
        procs[name].send_signal(signal.SIGKILL)
        procs[name].wait(10)
        kills += 1
        procs[name] = fw.worker(APP, *args, OUTLAST_WORKER_NAME=name, **env)
    for s in senders:
        assert s.wait(120) == 0, "a producer failed"
    fw.wait_settled(ids, timeout=120)
    took = time.monotonic() - began
    problems = verdict(fw, ids, messages, producers)
    [(dispatches,)] = fw.sql("SELECT count(*) FROM dispatches")
    print(
        f"{kills} kills; all taken in {took:.1f}s; {dispatches} dispatches for {runs_n * messages} messages"
    )
    assert kills >= 1
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems[:20])


def verdict(fw: FaultWorld, ids: list[str], messages: int, producers: int) -> list[str]:
    problems = []
    want = sorted((p, i) for i in range(messages) for p in [i % producers])
    states = dict(fw.sql("SELECT id, state FROM runs WHERE id = ANY(%s)", ids))
    results = dict(fw.sql("SELECT id, result FROM runs WHERE id = ANY(%s)", ids))
    effects: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for run_id, message in fw.sql("SELECT run_id, message FROM handled ORDER BY run_id, n"):
        effects[run_id].append((message["p"], message["i"]))
    for run_id in ids:
        if states.get(run_id) != "succeeded":
            problems.append(f"run {run_id} is {states.get(run_id)}")
            continue
        got = [(m["p"], m["i"]) for m in results[run_id]]
        if sorted(got) != want:
            problems.append(f"run {run_id} took {got}, not each of its {messages} messages once")
        for p in range(producers):
            order = [i for q, i in got if q == p]
            if order != sorted(order):
                problems.append(f"run {run_id}: producer {p}'s messages taken out of order: {order}")
        if sorted(effects[run_id]) != want:
            problems.append(f"run {run_id}: effects {effects[run_id]}, not one per message")
    return problems
