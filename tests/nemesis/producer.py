"""A producer process of the nemesis: ``python -m tests.nemesis.producer SEED INDEX COUNT RATE DIR``
(its servers in the OUTLAST_* environment). It enqueues its share of the plan at RATE runs a
second, each twice (a producer's retry after a lost answer: the same run id is the same run),
retrying through outages, with its budget; sends each chat run of either producer's plan its
messages from this producer, in order, one a step after the run's own step, some twice with one
id; cancels the runs the plan cancels; producer 0 also decides every
pending approval, as a client would, until the file DIR/stop exists. It writes what it did to
DIR/producer-INDEX.json."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from outlast import Client
from outlast.errors import OutlastError
from outlast.settings import Settings
from tests.nemesis.workload import CHANNEL, Planned, message, plan


def retried(what: Any, *args: Any, tries: float = 120.0, **kw: Any) -> Any:
    """``what(*args, **kw)`` until it answers (an outage passes), or raise after ``tries`` s."""
    until = time.monotonic() + tries
    while True:
        try:
            return what(*args, **kw)
        except OutlastError:
            if time.monotonic() > until:
                raise
            time.sleep(0.2)


def main() -> None:
    seed, index, count, rate, folder = (
        int(sys.argv[1]),
        int(sys.argv[2]),
        int(sys.argv[3]),
        float(sys.argv[4]),
        Path(sys.argv[5]),
    )
    done: dict[str, Any] = {
        "enqueued": 0,
        "again": 0,
        "sent": 0,
        "sent twice": 0,
        "cancelled": 0,
        "approved": 0,
        "errors": [],
    }
    # Each chat run of both plans gets message n of this producer at its own step + 1 + n.
    sends = sorted(
        (k + 1 + n, p.run_id, n)
        for q in range(2)
        for k, p in enumerate(plan(seed, q, count))
        if p.workflow == "chat"
        for n in range(p.input["each"])
    )
    with Client(settings=Settings.from_env()) as client:
        began = time.monotonic()
        cancels: list[tuple[float, str]] = []
        for k, p in enumerate(plan(seed, index, count)):
            time.sleep(max(began + k / rate - time.monotonic(), 0.0))
            enqueue(client, p, done)
            while sends and sends[0][0] <= k:
                _step, rid, n = sends.pop(0)
                send(client, rid, n, index, done)
            if p.cancel:
                cancels.append((time.monotonic() + 0.5, p.run_id))
            cancels = cancel_due(client, cancels, done)
            if index == 0:
                approve(client, done)
        for _step, rid, n in sends:
            send(client, rid, n, index, done)
        while not (folder / "stop").exists():
            cancels = cancel_due(client, cancels, done)
            if index == 0:
                approve(client, done)
            time.sleep(0.3)
    (folder / f"producer-{index}.json").write_text(json.dumps(done))


def enqueue(client: Client, p: Planned, done: dict[str, Any]) -> None:
    """The planned run, enqueued twice: the same run id is the same run."""
    first = retried(client.enqueue, p.workflow, p.input, run_id=p.run_id, budget=p.budget)
    again = retried(client.enqueue, p.workflow, p.input, run_id=p.run_id, budget=p.budget)
    done["enqueued"] += 1
    done["again"] += int(again.id == first.id)


def send(client: Client, rid: str, n: int, index: int, done: dict[str, Any]) -> None:
    """This producer's message ``n`` to run ``rid``, retried until stored (the run may not be
    enqueued yet), then again with the same id when the plan says so: a duplicate."""
    mid, payload, twice = message(rid, index, n)
    retried(client.send, rid, CHANNEL, payload, message_id=mid)
    done["sent"] += 1
    if twice:
        try:
            done["sent twice"] += int(client.send(rid, CHANNEL, payload, message_id=mid).duplicate)
        except OutlastError as exc:  # the run took its last message and ended meanwhile, or an outage
            if len(done["errors"]) < 20:
                done["errors"].append(str(exc)[:200])


def cancel_due(
    client: Client, cancels: list[tuple[float, str]], done: dict[str, Any]
) -> list[tuple[float, str]]:
    left = []
    for at, rid in cancels:
        if at > time.monotonic():
            left.append((at, rid))
            continue
        try:
            if not client.status(rid).final:
                client.cancel(rid)
                done["cancelled"] += 1
        except OutlastError as exc:
            if "final state" not in str(exc):
                left.append((time.monotonic() + 1.0, rid))  # an outage: later
    return left


def approve(client: Client, done: dict[str, Any]) -> None:
    try:
        for req in client.pending_approvals():
            client.approve(
                req["run_id"], req["op_id"], comment="nemesis", args_hash=req["args_hash"], approver="ops"
            )
            done["approved"] += 1
    except OutlastError as exc:
        if len(done["errors"]) < 20:
            done["errors"].append(str(exc)[:200])


if __name__ == "__main__":
    main()
