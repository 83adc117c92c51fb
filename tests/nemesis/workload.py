"""The nemesis's runs, planned from its seed: which workflow, which input, which budget, which to
cancel, and the messages each producer sends a ``chat`` run. Both the producers and the checker
derive the same plan, so a run's fate is known by its id."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Planned:
    run_id: str
    workflow: str
    input: dict[str, Any]
    cancel: bool  # a producer cancels it soon after enqueueing it
    budget: dict[str, float] | None = None  # a budget the transfers spend (children share it)


KINDS = (("payment", 5), ("approved", 2), ("timer", 2), ("parent", 1), ("chat", 2))
CHANNEL = "m"
BUDGET = {"usd": 100_000.0}


def message(run_id: str, producer: int, n: int) -> tuple[str, dict[str, int], bool]:
    """Producer ``producer``'s ``n``-th message to a chat run: its id, its payload, and whether
    the producer sends it twice (a retry after a lost answer: the same id is the same message)."""
    twice = random.Random(f"{run_id}/{producer}/{n}").random() < 0.3
    return f"{producer}-{n}", {"from": producer, "n": n}, twice


def plan(seed: int, producer: int, count: int, pace: float = 0.3) -> list[Planned]:
    """The ``count`` runs producer ``producer`` enqueues (ids unique to the seed and producer)."""
    rng = random.Random(f"{seed}/{producer}")
    names = [k for k, w in KINDS for _ in range(w)]
    out = []
    for i in range(count):
        kind = rng.choice(names)
        data: dict[str, Any] = {"pace": pace}
        if kind == "timer":
            data["seconds"] = round(rng.uniform(0.5, 4.0), 2)
        elif kind == "chat":
            data["each"] = rng.randint(1, 3)  # messages from each producer
        else:
            data["amount"] = rng.randint(1, 500)
        cancel = kind in ("payment", "timer") and rng.random() < 0.1
        budget = BUDGET if kind in ("payment", "approved", "parent") else None
        out.append(Planned(f"nem-{seed}-{producer}-{i}", kind, data, cancel, budget))
    return out
