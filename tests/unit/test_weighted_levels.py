"""The weighted choice among a queue's priority levels."""

from __future__ import annotations

import itertools

from outlast.worker.priority import Weighted


def test_twelve_picks_are_8_3_1_and_low_waits_at_most_eleven() -> None:
    w = Weighted()
    picks = [w.pick() for _ in range(1200)]
    assert {level: picks.count(level) for level in ("high", "normal", "low")} == {
        "high": 800,
        "normal": 300,
        "low": 100,
    }
    lows = [i for i, level in enumerate(picks) if level == "low"]
    assert max(b - a for a, b in itertools.pairwise(lows)) == 12
    assert picks[:12].count("high") == 8  # spread out, and the same in every window of twelve


def test_share_keeps_the_turn_across_calls() -> None:
    w = Weighted()
    shares = [w.share(1) for _ in range(12)]  # one place at a time, as a saturated worker frees them
    assert sum(s["low"] for s in shares) == 1 and sum(s["normal"] for s in shares) == 3
    assert Weighted().share(12) == {"high": 8, "normal": 3, "low": 1}
