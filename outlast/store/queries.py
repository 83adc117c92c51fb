"""Named SQL statements, parsed once from ``queries.sql``."""

from __future__ import annotations

import re
from importlib import resources


def _load() -> dict[str, str]:
    text = resources.files("outlast.store").joinpath("queries.sql").read_text()
    out: dict[str, str] = {}
    for block in re.split(r"^-- name: ", text, flags=re.M)[1:]:
        name, _, sql = block.partition("\n")
        body = "\n".join(ln for ln in sql.splitlines() if not ln.lstrip().startswith("--"))
        out[name.strip()] = body.strip().rstrip(";")
    return out


Q = _load()
