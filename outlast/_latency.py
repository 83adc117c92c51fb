"""Operation latencies are kept as histogram bucket counts. This module holds what a worker keeps in
memory per tool (``TALLY``, counted by the hook ``metrics.operation`` calls when an operation ends),
what its sweeper adds to the charts' rollup once a minute (``outlast/worker/rollup.py``), and the
quantiles read back from summed buckets (``quantile``), as Prometheus's ``histogram_quantile`` reads
its own.

The bounds are those of the ``outlast_operation_seconds`` histogram. The rollup stores counts by
position: changing ``BOUNDS`` changes the meaning of the rows already kept (for eight days).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence

# Seconds: from a millisecond-fast read to a tool that runs for minutes. A count per bound (the
# operations that took at most that long and more than the bound before) and one above the last.
BOUNDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


class Tally:
    """A ``Tally`` holds one process's operation latencies since they were last taken, per tool: a
    list of counts per bucket. Counted on the event loop's thread only (the dispatcher's), so no
    lock."""

    def __init__(self) -> None:
        self.counts: dict[str, list[int]] = {}

    def add(self, tool: str, seconds: float) -> None:
        """One operation of ``tool`` that took ``seconds``: a dict lookup, a bisection of 16
        bounds and an increment (no allocation but a tool's first list)."""
        c = self.counts.get(tool)
        if c is None:
            c = self.counts[tool] = [0] * (len(BOUNDS) + 1)
        c[bisect_left(BOUNDS, seconds)] += 1

    def take(self) -> dict[str, list[int]]:
        """What was counted since the last take, and a fresh start."""
        taken, self.counts = self.counts, {}
        return taken


TALLY = Tally()  # the process's: a worker's sweeper takes it once a minute


def quantile(counts: Sequence[int], q: float) -> float | None:
    """The ``q`` quantile (0 < q < 1) of the latencies counted in ``counts`` (one per bucket of
    ``BOUNDS``, then one above): interpolated linearly inside its bucket, as ``histogram_quantile``
    does; above the last bound, the last bound (a lower bound of the truth). None: nothing counted."""
    total = sum(counts)
    if total <= 0:
        return None
    rank, seen = q * total, 0
    for i, n in enumerate(counts):
        if n and seen + n >= rank:
            if i >= len(BOUNDS):
                return float(BOUNDS[-1])
            low = BOUNDS[i - 1] if i else 0.0
            return low + (BOUNDS[i] - low) * (rank - seen) / n
        seen += n
    return float(BOUNDS[-1])  # pragma: no cover - rank <= total always lands in a bucket


def summary(counts: Sequence[int]) -> dict[str, float | int | None]:
    """How many operations ``counts`` holds, and their p50 and p95 in seconds (None if none)."""
    return {"operations": sum(counts), "p50": quantile(counts, 0.5), "p95": quantile(counts, 0.95)}
