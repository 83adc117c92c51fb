"""The project's own checks run with the tests: ruff, ruff format, strict mypy on outlast/."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "cmd",
    [
        ["ruff", "check", "."],
        ["ruff", "format", "--check", "."],
        ["mypy", "outlast"],
    ],
    ids=["ruff", "ruff-format", "mypy"],
)
def test_checks_pass(cmd: list[str]) -> None:
    p = subprocess.run([sys.executable, "-m", *cmd], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
