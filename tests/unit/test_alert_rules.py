"""The example Prometheus alert rules (docs/prometheus/outlast-alerts.yml): they name only metrics
a worker exports, promtool accepts them, and its unit test (alert_rules_test.yml) shows each alert
firing when its figure goes bad, after its `for`, and not before. CI installs promtool (Debian's
`prometheus`, in .ci/run); without it the promtool test is skipped, saying so."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "docs" / "prometheus" / "outlast-alerts.yml"
RULES_TEST = Path(__file__).with_name("alert_rules_test.yml")


def test_the_rules_name_only_metrics_a_worker_exports() -> None:
    declared = set(re.findall(r'"(outlast_[a-z_]+)"', (ROOT / "outlast" / "_metrics.py").read_text()))
    assert "outlast_in_doubt_open" in declared
    # As prometheus-client exposes them: a counter with _total, a histogram with its series.
    exported = declared | {
        f"{n}{suffix}" for n in declared for suffix in ("_total", "_bucket", "_count", "_sum")
    }
    used = set(re.findall(r"\b(outlast_[a-z_]+)\b", RULES.read_text()))
    assert used, "the rules name no outlast metric"
    assert used <= exported, f"not exported by outlast/_metrics.py: {sorted(used - exported)}"


@pytest.mark.skipif(
    shutil.which("promtool") is None, reason="no promtool (Debian: apt-get install prometheus)"
)
def test_promtool_checks_the_rules_and_their_unit_test_passes() -> None:
    for command in (["check", "rules", str(RULES)], ["test", "rules", RULES_TEST.name]):
        done = subprocess.run(
            ["promtool", *command], cwd=RULES_TEST.parent, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, f"promtool {' '.join(command)}:\n{done.stdout}{done.stderr}"
