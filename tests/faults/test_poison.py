"""Poison entries: raw stream entries that name no run a worker of this queue may serve — a run id
that is not UTF-8, one with a NUL, an entry with no 'run' field, one on queue ``default`` naming a
run of queue ``b`` — are added (XADD) among normal runs. Each lands in the dead-letter stream within
5 s with a reason, none is executed (no effect; the run of queue ``b`` stays queued for a worker of
its own queue), and the normal runs around them all succeed."""

from __future__ import annotations

import time

import redis

from outlast.queue.streams import Queue
from tests.conftest import wait_for
from tests.faults import FaultWorld, check_every_run_once, enqueue_many

BOUND = 5.0
CHAIN = {"tool": "effect", "n": 5}


def _reason(fields: dict[bytes, bytes]) -> str:
    return next((v.decode(errors="replace") for k, v in fields.items() if b"reason" in k and v.strip()), "")


def test_poison_entries_are_dead_lettered_and_normal_runs_go_on(fw: FaultWorld) -> None:
    q = Queue(fw.redis_url, fw.prefix, client=object())  # for its key names only
    stream, dead = q.stream("default"), q.dead_stream("default")
    raw = redis.Redis.from_url(fw.redis_url)  # bytes in, bytes out
    fw.start("poison-0", "-c", "8")
    ids = enqueue_many(fw, "chain", [CHAIN for _ in range(10)])
    elsewhere = enqueue_many(fw, "chain", [CHAIN], queue="b")[0]  # no worker serves queue b
    poison = {
        "a run id that is not UTF-8": {b"run": b"\xff\xfe\xfdrun"},
        "a run id with a NUL": {b"run": b"run\x00id"},
        "no 'run' field": {b"job": b"whatever"},
        "a run of queue b on queue default": {b"run": elsewhere.encode()},
    }
    began = time.monotonic()
    entries = {raw.xadd(stream, fields).decode(): what for what, fields in poison.items()}
    ids += enqueue_many(fw, "chain", [CHAIN for _ in range(10)])
    letters: dict[str, tuple[float, dict[bytes, bytes]]] = {}

    def look() -> bool:
        for _eid, fields in raw.xrange(dead):
            entry = fields.get(b"_entry", b"").decode(errors="replace")
            if entry in entries and entry not in letters:
                letters[entry] = (time.monotonic() - began, fields)
        return len(letters) == len(entries)

    problems = []
    try:
        wait_for(look, BOUND, 0.05, "the poison entries to be dead-lettered")
    except AssertionError:
        missing = [what for entry, what in entries.items() if entry not in letters]
        problems.append(f"not dead-lettered within {BOUND:g}s: {missing}")
    for entry, (after, fields) in sorted(letters.items(), key=lambda x: x[1][0]):
        print(f"\ndead-lettered after {after:.2f}s: {entries[entry]}: {_reason(fields)!r}")
        if not _reason(fields):
            problems.append(f"dead letter of {entries[entry]} gives no reason: {fields}")
    try:
        fw.wait_settled(ids, timeout=30, what="the normal runs to settle")
    except AssertionError as exc:
        problems.append(str(exc))
    state = fw.sql("SELECT state FROM runs WHERE id = %s", elsewhere)[0][0]
    if state != "queued":
        problems.append(f"the run of queue b was taken from queue default: it is {state}")
    executed = sum(n for (rid, _op), n in fw.effects().items() if rid not in ids)
    if executed:
        problems.append(f"{executed} effects of runs named by poison entries")
    pending = raw.xpending(stream, "workers")["pending"] if raw.exists(stream) else 0
    print(f"entries left pending on the stream: {pending}")
    raw.close()
    assert not problems, "\n".join(problems)
    check_every_run_once(fw, ids)
