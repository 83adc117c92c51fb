"""Each migration opens (after its directives) by saying which schema version it makes: the
number of its file (branches merged under new numbers once left their old ones in these words)."""

from __future__ import annotations

import re
from pathlib import Path

MIGRATIONS = Path(__file__).resolve().parents[2] / "outlast" / "store" / "migrations"


def test_each_migration_names_its_own_version() -> None:
    files = sorted(MIGRATIONS.glob("[0-9][0-9][0-9][0-9]_*.sql"))
    assert files
    wrong = []
    for f in files:
        # after its directives (``-- compat:``, ``-- transaction:``), the first words say it
        first = next(
            line
            for line in f.read_text().splitlines()
            if not re.match(r"-- \w+: ", line) or line.startswith("-- Version")
        )
        said = re.match(r"-- Version (\d+):", first)
        if said is None or int(said[1]) != int(f.name[:4]):
            wrong.append(f"{f.name}: {first[:40]}")
    assert not wrong, wrong
