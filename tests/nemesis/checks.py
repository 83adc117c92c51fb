"""Judges the nemesis's findings that need no server, from rows the harness read: messages taken
exactly once and in order, the budget spent against the ledger, each in-doubt operation in a fault
window, and the figures of takeovers and of runs slowed by each kind of fault.
tests/nemesis/test_checks.py feeds each a broken history and sees it fail."""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass

SLACK = 1.0  # seconds: the harness's clock and the database's, and the moment a fault is applied


@dataclass(frozen=True)
class Window:
    """A fault as applied: its kind, its target (a worker, or Postgres or Redis), wall-clock times."""

    kind: str
    target: str
    begin: float
    end: float

    def named(self, zero: float) -> str:
        return f"{self.kind}@{self.target} [+{self.begin - zero:.1f}s, +{self.end - zero:.1f}s]"


def windows_over(windows: list[Window], begin: float, end: float) -> list[Window]:
    """The windows that overlap ``[begin, end]`` (widened by ``SLACK``)."""
    return [w for w in windows if w.begin - SLACK <= end and begin <= w.end + SLACK]


def in_doubt_windows(
    in_doubt: list[tuple[str, str, float, float]], windows: list[Window], zero: float
) -> tuple[list[str], list[str]]:
    """Each in-doubt operation (run, operation, its intention's time, the in-doubt entry's time) named
    with the fault windows its doubt overlapped (dispatched before a window ended, found in doubt
    after it began); one that overlaps none is a violation. Returns (lines, violations)."""
    lines, violations = [], []
    for rid, op, dispatched, doubted in in_doubt:
        found = windows_over(windows, dispatched, doubted)
        lines.append(f"{rid} {op}: in {', '.join(w.named(zero) for w in found) or 'NO fault window'}")
        if not found:
            violations.append(
                f"{rid} {op} in doubt (dispatched +{dispatched - zero:.1f}s, found +{doubted - zero:.1f}s) "
                "in no fault window"
            )
    return lines, violations


def messages_taken(
    expected: dict[str, int], taken: list[tuple[str, str, int, int]], journaled: dict[str, int]
) -> list[str]:
    """Each chat run (``expected``: run -> messages from each of the 2 producers) took exactly its
    distinct messages, each producer's in its order, with one effect each: ``taken`` holds the
    world's rows (run, operation, producer, n), ``journaled`` outlast's message entries per run."""
    v = []
    rows: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
    for rid, op, sender, n in taken:
        rows[rid].append((int(op.rpartition("-")[2]), sender, n))
    for rid, each in expected.items():
        got = [(sender, n) for _op, sender, n in sorted(rows.get(rid, []))]
        want = {(sender, n) for sender in range(2) for n in range(each)}
        if twice := sorted(m for m, c in Counter(got).items() if c > 1):
            v.append(f"{rid}: message(s) {twice} taken more than once")
        if missing := sorted(want - set(got)):
            v.append(f"{rid}: message(s) {missing} sent, never taken")
        if extra := sorted(set(got) - want):
            v.append(f"{rid}: message(s) {extra} taken, never sent")
        for sender in range(2):
            order = [n for s, n in got if s == sender]
            if order != sorted(order):
                v.append(f"{rid}: producer {sender}'s messages taken in the order {order}")
        if journaled.get(rid, 0) != len(want):
            v.append(f"{rid}: {journaled.get(rid, 0)} messages journaled as taken, {len(want)} sent")
    return v


def budget_spent(spent: dict[str, float], paid: dict[str, float]) -> list[str]:
    """Each budget's spend as outlast recorded it equals the amounts its runs' transfers put in the
    ledger (``paid``, by budget)."""
    return [
        f"budget {b}: outlast recorded {spent.get(b, 0.0):g} spent, the ledger holds {paid.get(b, 0.0):g}"
        for b in sorted(set(spent) | set(paid))
        if abs(spent.get(b, 0.0) - paid.get(b, 0.0)) > 1e-6
    ]


def delays(figures: dict[str, list[float]]) -> dict[str, str]:
    """Takeover delays by kind of fault: how many, median, 90th percentile, longest (seconds)."""
    out = {}
    for kind, d in sorted(figures.items()):
        q = sorted(d)
        out[kind] = (
            f"{len(q)} runs, median {statistics.median(q):.1f}s, "
            f"p90 {q[math.ceil(0.9 * len(q)) - 1]:.1f}s, max {q[-1]:.1f}s"
        )
    return out


def slowed(runs: list[tuple[float, float]], windows: list[Window]) -> dict[str, int]:
    """Per kind of fault, how many runs (started, finished) lasted across one of its windows."""
    out: Counter[str] = Counter()
    for begin, end in runs:
        for kind in {w.kind for w in windows if w.begin <= end and begin <= w.end}:
            out[kind] += 1
    return dict(sorted(out.items()))
