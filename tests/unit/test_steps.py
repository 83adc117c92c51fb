"""What each migration declares (docs/upgrading.md): expand or contract, in a transaction or not;
the oldest code a database at each version accepts; a migration's statements, one by one."""

from __future__ import annotations

import pytest

from outlast.errors import SchemaError
from outlast.store.steps import MIGRATIONS, Migration, oldest_code, parse


def test_every_migration_declares_what_older_code_may_do() -> None:
    assert all(m.expand or m.code_from for m in MIGRATIONS)
    # Reviewed (docs/upgrading.md): 0015 on only expand; before it, not reviewed, counted as contracts.
    assert [m.version for m in MIGRATIONS if m.version >= 15 and not m.expand] == []
    assert [m.version for m in MIGRATIONS if m.version < 15 and m.expand] == []


@pytest.mark.parametrize(
    ("text", "wanted"),
    [
        ("-- compat: expand\nSELECT 1;", (True, 0, True)),
        ("-- compat: contract\nSELECT 1;", (False, 30, True)),
        ("-- compat: contract, code from 28\n-- transaction: none\nSELECT 1;", (False, 28, False)),
    ],
)
def test_the_declarations_are_read(text: str, wanted: tuple[bool, int, bool]) -> None:
    m = parse("0030_x.sql", text)
    assert (m.expand, m.code_from, m.transactional) == wanted


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("SELECT 1;", "must declare once"),
        ("-- compat: expand\n-- compat: contract\n", "must declare once"),
        ("-- compat: expand, code from 3\n", "only a contract"),
        ("-- compat: contract, code from 31\n", "newer than the migration"),
    ],
)
def test_a_migration_without_a_clear_declaration_is_refused(text: str, said: str) -> None:
    with pytest.raises(SchemaError, match=said):
        parse("0030_x.sql", text)


def test_the_oldest_code_is_what_the_newest_contract_names() -> None:
    steps = (
        Migration(1, "0001_a.sql", "", expand=False, code_from=1),
        Migration(2, "0002_b.sql", ""),
        Migration(3, "0003_c.sql", "", expand=False, code_from=2),  # code that knows 2 runs on it
        Migration(4, "0004_d.sql", ""),
    )
    assert [oldest_code(v, steps) for v in range(5)] == [0, 1, 1, 2, 2]


def test_statements_are_split_where_a_semicolon_ends_one() -> None:
    text = """-- compat: expand
-- transaction: none
-- a comment; with a semicolon
ALTER TABLE t ADD COLUMN IF NOT EXISTS c text DEFAULT 'a;b';  -- after it; too
CREATE OR REPLACE FUNCTION f() RETURNS int AS $body$ SELECT 1; $body$ LANGUAGE sql;
CREATE INDEX CONCURRENTLY IF NOT EXISTS i ON t (c);
-- the end
"""
    assert parse("0030_x.sql", text).statements() == [
        "ALTER TABLE t ADD COLUMN IF NOT EXISTS c text DEFAULT 'a;b';",
        "CREATE OR REPLACE FUNCTION f() RETURNS int AS $body$ SELECT 1; $body$ LANGUAGE sql;",
        "CREATE INDEX CONCURRENTLY IF NOT EXISTS i ON t (c);",
    ]


def test_through_a_transaction_pooler_the_indexes_are_built_in_the_transaction() -> None:
    m = parse(
        "0030_x.sql",
        "-- compat: expand\n-- transaction: none\nCREATE INDEX CONCURRENTLY IF NOT EXISTS i ON t (c);",
    )
    assert m.in_one_transaction().splitlines()[-1] == "CREATE INDEX IF NOT EXISTS i ON t (c);"
