"""Each priority level has a share in what a worker reads. Weighted, never strict: a
saturated ``high`` level cannot starve ``low``, which still gets one read in twelve."""

from __future__ import annotations

from outlast.queue.streams import LEVELS

WEIGHTS = {"high": 8, "normal": 3, "low": 1}


class Weighted:
    """``Weighted`` picks by smooth weighted round robin (as nginx balances upstreams): of every 12
    picks, 8 go to ``high``, 3 to ``normal`` and 1 to ``low``, interleaved rather than in runs."""

    def __init__(self) -> None:
        self._current = dict.fromkeys(LEVELS, 0)
        self._total = sum(WEIGHTS.values())

    def pick(self) -> str:
        for level in LEVELS:
            self._current[level] += WEIGHTS[level]
        best = max(LEVELS, key=lambda level: self._current[level])
        self._current[best] -= self._total
        return best

    def share(self, room: int) -> dict[str, int]:
        """How many entries to read from each level to fill ``room`` places."""
        counts = dict.fromkeys(LEVELS, 0)
        for _ in range(room):
            counts[self.pick()] += 1
        return counts
