"""A producer process of the nemesis: ``python -m tests.nemesis.producer SEED INDEX COUNT RATE DIR``
(its servers in the OUTLAST_* environment). It enqueues its share of the plan at RATE runs a
second, each twice (a producer's retry after a lost answer: the same run id is the same run),
retrying through outages; cancels the runs the plan cancels; producer 0 also decides every
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
from tests.nemesis.workload import plan


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
    done: dict[str, Any] = {"enqueued": 0, "again": 0, "cancelled": 0, "approved": 0, "errors": []}
    with Client(settings=Settings.from_env()) as client:
        began = time.monotonic()
        cancels: list[tuple[float, str]] = []
        for k, p in enumerate(plan(seed, index, count)):
            time.sleep(max(began + k / rate - time.monotonic(), 0.0))
            first = retried(client.enqueue, p.workflow, p.input, run_id=p.run_id)
            again = retried(client.enqueue, p.workflow, p.input, run_id=p.run_id)
            done["enqueued"] += 1
            done["again"] += int(again.id == first.id)
            if p.cancel:
                cancels.append((time.monotonic() + 0.5, p.run_id))
            cancels = cancel_due(client, cancels, done)
            if index == 0:
                approve(client, done)
        while not (folder / "stop").exists():
            cancels = cancel_due(client, cancels, done)
            if index == 0:
                approve(client, done)
            time.sleep(0.3)
    (folder / f"producer-{index}.json").write_text(json.dumps(done))


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
