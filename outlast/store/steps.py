"""This module reads the migrations as files (``migrations/NNNN_name.sql``) and what each declares
about the code that may run on a database that has it (docs/upgrading.md).

Every file says, in a comment line of its own, whether it only **expands** the schema (older code
keeps working on it: new tables, new nullable or defaulted columns, new indexes, a function
replaced with the same signature and meaning) or **contracts** it (code that knows fewer
migrations must not run on it: a column dropped or renamed, a meaning changed, a journal or queue
format older code cannot read)::

    -- compat: expand
    -- compat: contract
    -- compat: contract, code from 21

A contract migration makes the oldest code that may run on the database the one that knows
``code from`` (by default its own number); ``migrate`` records that number beside the version
(``oldest_code`` in ``outlast_meta``), so that code older than the database, which cannot read
the newer files, still knows whether it may run. A file may also say ``-- transaction: none``:
its statements then run one at a time, outside a transaction (``CREATE INDEX CONCURRENTLY``), and
each must be safe to run again (``IF NOT EXISTS``, ``IF EXISTS``, ``OR REPLACE``): a migration
interrupted half-way is run again from its first statement.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

from outlast.errors import SchemaError

_COMPAT = re.compile(r"^-- compat: (expand|contract)(?:, code from (\d+))?$", re.M)
_NO_TRANSACTION = re.compile(r"^-- transaction: none$", re.M)
_CONCURRENTLY = re.compile(r"\b(CREATE|DROP) INDEX CONCURRENTLY\b")
# What can hold a semicolon that does not end a statement: a dollar-quoted body, a string literal,
# a comment. Anything else's semicolon ends one.
_TOKENS = re.compile(r"\$(\w*)\$.*?\$\1\$|'(?:[^']|'')*'|--[^\n]*|;", re.S)


@dataclass(frozen=True)
class Migration:
    """A ``Migration`` is one step of the schema: ``migrations/NNNN_name.sql``, applied once, in order."""

    version: int
    name: str
    sql: str
    expand: bool = True  # older code keeps working on it
    code_from: int = 0  # a contract: the oldest code (by the version it knows) that may run on it
    transactional: bool = True  # else its statements run one by one, outside a transaction

    def statements(self) -> list[str]:
        """The file's statements, one by one (for a migration run outside a transaction)."""
        out, start = [], 0
        for m in _TOKENS.finditer(self.sql):
            if m.group(0) == ";":
                out.append(self.sql[start : m.end()])
                start = m.end()
        out.append(self.sql[start:])
        return [body for s in out if (body := _uncommented(s))]

    def in_one_transaction(self) -> str:
        """A ``transaction: none`` migration as one transaction can run it: its indexes built and
        dropped without CONCURRENTLY (writes to the table wait for them)."""
        return _CONCURRENTLY.sub(r"\1 INDEX", self.sql)


def _uncommented(statement: str) -> str:
    """The statement without the comment lines and blank lines before it ('' if nothing else)."""
    lines = statement.strip().splitlines()
    while lines and (not lines[0].strip() or lines[0].lstrip().startswith("--")):
        lines.pop(0)
    return "\n".join(lines).strip()


def parse(name: str, text: str) -> Migration:
    """A migration file, its declarations read (refused without one)."""
    m = re.fullmatch(r"(\d{4})_[a-z0-9_]+\.sql", name)
    if not m:
        raise SchemaError(f"migration file {name} is not named NNNN_name.sql")
    version = int(m[1])
    compat = _COMPAT.findall(text)
    if len(compat) != 1:
        raise SchemaError(
            f"migration {name} must declare once whether older code keeps working on it: a line "
            "'-- compat: expand' or '-- compat: contract[, code from N]' (docs/upgrading.md)"
        )
    kind, code_from = compat[0]
    if kind == "expand" and code_from:
        raise SchemaError(f"migration {name}: only a contract names the code it needs ('code from N')")
    needs = int(code_from or version) if kind == "contract" else 0
    if needs > version:
        raise SchemaError(f"migration {name}: 'code from {needs}' names code newer than the migration")
    return Migration(version, name, text, kind == "expand", needs, not _NO_TRANSACTION.search(text))


def _migrations() -> tuple[Migration, ...]:
    found = []
    for f in resources.files("outlast.store").joinpath("migrations").iterdir():
        if f.name.endswith(".sql"):
            found.append(parse(f.name, f.read_text()))
    found.sort(key=lambda m: m.version)
    if [m.version for m in found] != list(range(1, len(found) + 1)):
        raise SchemaError(
            f"migrations must be numbered 0001, 0002, ... without gaps: {[m.name for m in found]}"
        )
    return tuple(found)


MIGRATIONS = _migrations()
SCHEMA_VERSION = MIGRATIONS[-1].version  # the newest migration's number


def oldest_code(version: int, migrations: tuple[Migration, ...] = MIGRATIONS) -> int:
    """The oldest code, by the schema version it knows, that may run on a database at ``version``:
    what the newest contract up to it names (expand migrations change nothing)."""
    return max((m.code_from for m in migrations[:version] if not m.expand), default=0)


def schema_sql() -> str:
    """The whole schema as one script, every migration in order: for reading; ``migrate``
    applies them one at a time."""
    return "\n".join(f"-- {m.name}\n{m.sql}" for m in MIGRATIONS)
