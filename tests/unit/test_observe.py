"""Metrics and tracing without their extras, or unasked: nothing counted, one line to fix it."""

from __future__ import annotations

import sys

import pytest

from outlast import _metrics as metrics, _tracing as tracing
from outlast.errors import ConfigError


def test_metrics_without_prometheus_client_say_which_extra_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # as if not installed
    with pytest.raises(ConfigError, match=r"pip install 'outlast\[metrics\]'"):
        metrics.serve(9464, 1)
    assert not metrics.enabled()
    metrics.operation("tool", "ok", 0.0)  # a hook before enable() counts nothing, and needs nothing


def test_no_trace_context_is_stored_without_an_active_span() -> None:
    assert tracing.carrier() is None
