"""The named statements of ``outlast/store/sql/*.sql``: one file per family, each name given once
(``Q`` is a dict: a second statement of the same name would silently replace the first)."""

from __future__ import annotations

from collections import defaultdict
from importlib import resources

from outlast.store.queries import Q, statements


def test_no_two_statements_share_a_name() -> None:
    files: dict[str, list[str]] = defaultdict(list)
    for s in statements():
        files[s.name].append(s.file)
    twice = {name: where for name, where in files.items() if len(where) > 1}
    assert not twice, "statement names given more than once (rename one): " + "; ".join(
        f"{name} in {', '.join(where)}" for name, where in sorted(twice.items())
    )
    assert len(Q) == len(statements())


def test_each_family_file_says_what_it_owns_before_its_first_statement() -> None:
    folder = resources.files("outlast.store").joinpath("sql")
    for f in folder.iterdir():
        if f.name.endswith(".sql"):
            first = f.read_text().splitlines()[0]
            assert first.startswith("-- ") and not first.startswith("-- name:"), (
                f"sql/{f.name} opens without a comment saying what its family owns"
            )
