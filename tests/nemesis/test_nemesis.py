"""The nemesis, short: a fixed seed's schedule of faults, several at once, over the workload of
tests/apps/nemesis.py, then every promise checked in the world's tables (tests/nemesis/__init__.py
says which). ``OUTLAST_NEMESIS_SEED`` and ``OUTLAST_NEMESIS_SECONDS`` replay or lengthen it (as
``bench/nemesis.py --seed S --minutes M`` does); a failing run prints its seed and keeps its logs
and journal in one folder."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.nemesis import Nemesis

pytestmark = [pytest.mark.crash, pytest.mark.slow]

SEED = int(os.environ.get("OUTLAST_NEMESIS_SEED", "2993"))
SECONDS = float(os.environ.get("OUTLAST_NEMESIS_SECONDS", "120"))
KEEP = Path(os.environ.get("OUTLAST_NEMESIS_KEEP", ROOT / ".nemesis"))


@pytest.mark.timeout(SECONDS * 2 + 240)
def test_nemesis(services: tuple[str, str]) -> None:
    root = Path(tempfile.mkdtemp(prefix="outlast-nemesis-"))
    root.chmod(0o755)
    n = Nemesis(root, services[0], SEED, SECONDS)
    began = time.monotonic()
    try:
        n.start()
        report = n.run(heal_for=max(45.0, SECONDS))
        print(f"nemesis: seed {SEED}, {time.monotonic() - began:.0f}s in all; faults {dict(report.faults)}")
        for what, figure in report.figures.items():
            print(f"  {what}: {figure}")
        if report.violations:
            kept = n.keep(KEEP / f"{SEED}-{int(time.time())}")
            lines = "\n".join(f"  - {v}" for v in report.violations[:30])
            pytest.fail(
                f"nemesis seed {SEED}: {len(report.violations)} violations "
                f"(logs and journal kept in {kept}); "
                f"replay: OUTLAST_NEMESIS_SEED={SEED} OUTLAST_NEMESIS_SECONDS={SECONDS:g} "
                f"python -m pytest tests/nemesis\n{lines}"
            )
    finally:
        n.destroy()
        shutil.rmtree(root, ignore_errors=True)
