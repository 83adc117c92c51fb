"""The nemesis's runs, planned from its seed: which workflow, which input, which to cancel. Both
the producers and the checker derive the same plan, so a run's fate is known by its id."""

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


KINDS = (("payment", 5), ("approved", 2), ("timer", 2), ("parent", 1))


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
        else:
            data["amount"] = rng.randint(1, 500)
        cancel = kind in ("payment", "timer") and rng.random() < 0.1
        out.append(Planned(f"nem-{seed}-{producer}-{i}", kind, data, cancel))
    return out
