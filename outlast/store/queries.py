"""Named SQL statements are parsed once from ``sql/*.sql``: one file per family, beside its module
(``sql/leases.sql`` holds the statements ``leases.py`` runs), each opening with what it owns.

Writes about a run that a worker owns are fenced by its token
(``outlast_held_by(fencing_token, state, %(token)s)``). Facts several statements share are SQL
functions, inlined by Postgres (a plan is the one the fact spelled out would have): of 0015,
outlast_final, outlast_unfinished (states), outlast_live (a worker), outlast_window (a tenant's
window), outlast_redone (a lost-ack re-check); of 0023, outlast_leased (the states a lease is held
in) and outlast_held_by (the lease holder's condition). Claims, leases
and due times read the time as ``{{now}}`` (``clock.sql``'s part: 0018_clock's database clock plus
the schema's offset, moved by tests); audit stamps and heartbeats, as ``now()``.

A text two statements share whole is a *part* (``-- part: NAME``, not a statement of its own): a
statement takes it in where it says ``{{NAME}}``, so the statement Postgres plans is the one it was
with the text spelled out (``journal.sql``'s fenced append, taken in by the message take).
"""

from __future__ import annotations

import re
from importlib import resources
from typing import NamedTuple


class Statement(NamedTuple):
    """One named statement, and the file of ``sql/`` that holds it."""

    file: str
    name: str
    sql: str


def statements() -> list[Statement]:
    """Every named statement of ``sql/*.sql``, by file name, then in each file's order, its parts
    taken in. A name given twice is listed twice (``tests/unit/test_queries_files.py`` refuses it)."""
    out: list[Statement] = []
    parts: dict[str, str] = {}
    folder = resources.files("outlast.store").joinpath("sql")
    for f in sorted((f for f in folder.iterdir() if f.name.endswith(".sql")), key=lambda f: f.name):
        pieces = re.split(r"^-- (name|part): ", f.read_text(), flags=re.M)
        for kind, block in zip(pieces[1::2], pieces[2::2], strict=True):
            name, _, sql = block.partition("\n")
            body = "\n".join(ln for ln in sql.splitlines() if not ln.lstrip().startswith("--"))
            if kind == "part":
                parts[name.strip()] = body.strip().rstrip(";")
            else:
                out.append(Statement(f.name, name.strip(), body.strip().rstrip(";")))
    return [s._replace(sql=re.sub(r"\{\{(\w+)\}\}", lambda m: parts[m[1]], s.sql)) for s in out]


Q = {s.name: s.sql for s in statements()}
