"""The latency tally the dashboard's charts roll up: which bucket an operation lands in, and the
quantiles read back from summed buckets (as Prometheus's histogram_quantile reads them)."""

from __future__ import annotations

import pytest

from outlast import _metrics as metrics
from outlast._latency import BOUNDS, TALLY, Tally, quantile, summary


def test_an_operation_lands_in_the_bucket_of_the_first_bound_it_does_not_exceed() -> None:
    t = Tally()
    for seconds in (0.0005, 0.001, 0.0011, 0.3, 300, 301):
        t.add("pay", seconds)
    counts = t.take()["pay"]
    assert len(counts) == len(BOUNDS) + 1
    assert counts[0] == 2  # 0.5 ms and 1 ms: le 0.001
    assert counts[1] == 1  # 1.1 ms: le 0.0025
    assert counts[BOUNDS.index(0.5)] == 1
    assert counts[BOUNDS.index(300)] == 1
    assert counts[-1] == 1  # above the last bound
    assert t.take() == {}  # taken: a fresh start


def test_quantiles_interpolate_inside_their_bucket() -> None:
    counts = [0] * (len(BOUNDS) + 1)
    i = BOUNDS.index(0.1)  # (0.05, 0.1]
    counts[i] = 100
    assert quantile(counts, 0.5) == pytest.approx(0.075)
    assert quantile(counts, 0.95) == pytest.approx(0.0975)
    counts[-1] = 100  # as many above 300 s: the p95 is said as the last bound, a lower bound
    assert quantile(counts, 0.95) == 300
    assert quantile(counts, 0.5) == pytest.approx(0.1)
    assert quantile([0] * len(counts), 0.5) is None
    assert summary(counts) == {"operations": 200, "p50": pytest.approx(0.1), "p95": 300.0}


def test_the_operation_hook_counts_the_tally_metrics_or_not() -> None:
    TALLY.take()
    metrics.operation("hook-tool", "ok", 0.0)  # started at perf_counter 0: long ago
    assert sum(TALLY.take()["hook-tool"]) == 1
