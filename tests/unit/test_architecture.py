"""ARCHITECTURE.md stays a true map: each part of its code map has a section that names real files,
every path-like ``outlast/...`` (or ``tests/...``, ``docs/...``, ``bench/...``) mention on the page
exists, every relative link leads to a file that exists (and, with an anchor, to a heading of that
file, or a line of it), and each "never imports" sentence about the store, the queue, the worker,
the client, the command line and the dashboard is still true of the code.

The detail of each part lives in its package's or module's docstring, beside the code it describes.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "ARCHITECTURE.md"

LINK = re.compile(r"\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)[^)]*\)")
# A path of the repository named in prose or code: `outlast/worker/loop.py`, `outlast/store/sql/`,
# `outlast/store/migrations/NNNN_*.sql` (a pattern: at least one file must match it).
PATH = re.compile(r"(?<![\w./-])((?:outlast|tests|docs|bench)/[\w./*-]*[\w/*])")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", lambda m: m[1] or "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """The anchors of a Markdown text's headings (a repeated one also as ``-1``, ``-2``, ...)."""
    found: set[str] = set()
    for m in re.finditer(r"^#{1,6} +(.+?) *#*$", FENCE.sub("", text), re.MULTILINE):
        s = slug(m[1])
        n = 0
        while (s if n == 0 else f"{s}-{n}") in found:
            n += 1
        found.add(s if n == 0 else f"{s}-{n}")
    return found


def broken_links(text: str, base: Path) -> list[str]:
    """The relative links of ``text`` (read from ``base``) whose file does not exist, or whose
    anchor names no heading of a Markdown file (``#name``) or no line of another file (``#L12``);
    ``#name`` alone is an anchor of ``text`` itself."""
    broken = []
    for m in LINK.finditer(text):
        target, _, frag = m[1].partition("#")
        if "://" in target or target.startswith("mailto:"):
            continue
        path = base / target if target else None
        if path is not None and not path.exists():
            broken.append(m[1])
        elif frag and path is not None and path.suffix != ".md":
            line = re.fullmatch(r"L(\d+)(?:-L(\d+))?", frag)
            if not line or int(line[line.lastindex or 1]) > len(path.read_text().splitlines()):
                broken.append(m[1])
        elif frag and frag not in anchors(path.read_text() if path is not None else text):
            broken.append(m[1])
    return broken


def missing_paths(text: str, root: Path) -> list[str]:
    """The path-like mentions of ``text`` that name nothing under ``root`` (a pattern, with ``*`` or
    a placeholder in capitals such as ``FAMILY`` or ``NNNN``, must match at least one file)."""
    missing = []
    for name in sorted(set(PATH.findall(text))):
        # A segment with a placeholder in capitals (FAMILY.sql, NNNN_name.sql) stands for any name.
        pattern = "/".join(
            "*" + seg[seg.index(".") :] if "." in seg and re.search("[A-Z]{3,}", seg) else seg
            for seg in name.split("/")
        )
        if "*" in pattern:
            if not any(root.glob(pattern)):
                missing.append(name)
        elif not (root / name).exists():
            missing.append(name)
    return missing


def sections(text: str, chapter: str) -> dict[str, str]:
    """The ``### `` sections of the ``## chapter``: heading -> body."""
    body = text.partition(f"\n## {chapter}\n")[2].partition("\n## ")[0]
    parts = re.split(r"^### (.+)$", body, flags=re.MULTILINE)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts), 2)}


def imported(package: str) -> dict[str, set[str]]:
    """For each module of ``outlast/<package>``: the ``outlast.*`` modules it imports (anywhere in it)."""
    found: dict[str, set[str]] = {}
    for path in sorted((ROOT / "outlast" / package).rglob("*.py")):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module)
            elif isinstance(node, ast.Import):
                names.update(a.name for a in node.names)
        found[str(path.relative_to(ROOT))] = {n for n in names if n.startswith("outlast.")}
    return found


def reaching(package: str, others: tuple[str, ...]) -> list[str]:
    """Each ``module -> import`` of ``package`` that reaches into one of ``others``."""
    return [
        f"{module} -> {name}"
        for module, names in imported(package).items()
        for name in sorted(names)
        if name.split(".")[1] in others
    ]


# The parts the code map must have a section for, and a package or module each must name.
PARTS = {
    "The worker": "outlast/worker/",
    "The store": "outlast/store/",
    "The queue": "outlast/queue/",
    "The client": "outlast/producer/",
    "The command line": "outlast/cli/",
    "The dashboard": "outlast/dashboard/",
    "The web endpoint": "outlast/web/",
    "The testing kit": "outlast/testing/",
    "Agents": "outlast/agents.py",
    "The embedded servers": "outlast/_embedded.py",
}
CONCERNS = ("run flows", "operation flows", "time is read", "cancellation", "errors", "tests are layered")


def test_each_part_has_a_section_naming_its_real_files() -> None:
    text = PAGE.read_text()
    parts = sections(text, "Code map")
    assert set(PARTS) <= set(parts), f"the code map lacks a section for: {set(PARTS) - set(parts)}"
    for name, body in parts.items():
        named = set(PATH.findall(body))
        assert len(named) >= 1, f"the section '{name}' names no file of the repository"
        if name in PARTS:
            assert any(n.startswith(PARTS[name]) for n in named), f"'{name}' never names {PARTS[name]}"
    concerns = " ".join(sections(text, "Cross-cutting concerns")).lower()
    assert all(c in concerns for c in CONCERNS), f"cross-cutting concerns must include {CONCERNS}"


def test_every_path_on_the_page_exists() -> None:
    missing = missing_paths(PAGE.read_text(), ROOT)
    assert not missing, f"ARCHITECTURE.md names paths that do not exist: {missing}"


def test_every_relative_link_resolves() -> None:
    broken = broken_links(PAGE.read_text(), ROOT)
    assert not broken, f"ARCHITECTURE.md has links that lead nowhere: {broken}"


def test_the_guarantees_table_lives_in_the_docs_and_names_real_files() -> None:
    """Which code and tests keep each promise is said once, in docs/guarantees.md, which the page
    links to; every file that table names exists."""
    guarantees = ROOT / "docs" / "guarantees.md"
    text = guarantees.read_text()
    table = text.partition("\n## Where each guarantee is enforced\n")[2]
    rows = [line for line in table.splitlines() if line.startswith("| ") and "`" in line]
    assert len(rows) >= 30, "docs/guarantees.md ends with the table of where each guarantee is enforced"
    assert "| guarantee | code | test |" not in PAGE.read_text(), "the table lives in docs/guarantees.md only"
    assert "](docs/guarantees.md" in PAGE.read_text()
    missing = missing_paths(table, ROOT)
    assert not missing, f"docs/guarantees.md names paths that do not exist: {missing}"


def test_contributing_states_the_caps_the_tests_hold_and_names_real_files() -> None:
    """CONTRIBUTING.md's design rules give the numbers the checks use, and every file it names exists."""
    import tomllib

    from tests.unit.test_rooms import MAX_LINES, MAX_METHODS

    ruff = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]
    text = (ROOT / "CONTRIBUTING.md").read_text()
    rules = text.partition("\n## Design rules\n")[2].partition("\n## ")[0]
    for said in (
        f"**{MAX_LINES} lines a module**",
        f"**{MAX_METHODS} methods a class**",
        f"**Complexity {ruff['lint']['mccabe']['max-complexity']} a function**",
        f"at most {ruff['line-length']} characters",
    ):
        assert said in rules, f"CONTRIBUTING.md's design rules should say {said!r}"
    for part in ("### The caps", "### Narrow doors", "### Adding a crossing", "### Reading `duplicates`"):
        assert part in rules, f"CONTRIBUTING.md's design rules lack {part}"
    missing = missing_paths(text, ROOT)
    assert not missing, f"CONTRIBUTING.md names paths that do not exist: {missing}"


def test_the_checks_find_what_is_wrong(tmp_path: Path) -> None:
    (tmp_path / "here.py").write_text("a\nb\n")
    (tmp_path / "doc.md").write_text("# Title\n\n## The `store` part\n```\n# not a heading\n```\n")
    text = (
        "# Own\n[ok](here.py) [ok too](here.py#L2) [web](https://example.com) [gone](nowhere.py)"
        " [self](#own) [no self](#other) [line](here.py#L3) [doc](doc.md#the-store-part)"
        " [no heading](doc.md#not-a-heading)"
    )
    assert broken_links(text, tmp_path) == ["nowhere.py", "#other", "here.py#L3", "doc.md#not-a-heading"]
    (tmp_path / "outlast" / "store" / "sql").mkdir(parents=True)
    (tmp_path / "outlast" / "store" / "sql" / "leases.sql").write_text("")
    (tmp_path / "outlast" / "m").mkdir()
    (tmp_path / "outlast" / "m" / "0001_a.sql").write_text("")
    prose = (
        "`outlast/store/sql/leases.sql`, `outlast/store/sql/`, outlast/m/NNNN_*.sql, outlast/m/NNNN_name.sql"
        " and outlast/store/sql/FAMILY.sql exist; "
        "`outlast/worker/gone.py`, outlast/store/sql/*.py and tests/unit/x.py do not (a.outlast/x: no path)."
    )
    assert missing_paths(prose, tmp_path) == [
        "outlast/store/sql/*.py",
        "outlast/worker/gone.py",
        "tests/unit/x.py",
    ]
    assert missing_paths("outlast/m/NNNN_name.py and outlast/FAMILY.sql", tmp_path) == [
        "outlast/FAMILY.sql",
        "outlast/m/NNNN_name.py",
    ]
    page = "# Page\n## Code map\n\n### One\n`outlast/a.py`\n### Two\nnothing\n## Next\n### Three\n"
    assert {k: set(PATH.findall(v)) for k, v in sections(page, "Code map").items()} == {
        "One": {"outlast/a.py"},
        "Two": set(),
    }


def test_the_architecture_invariants_hold() -> None:
    """The imports the page says are absent are absent (direct imports, at run time or not)."""
    assert not reaching("store", ("worker", "producer", "queue", "cli", "dashboard", "testing"))
    assert not reaching("queue", ("worker", "producer", "cli", "dashboard", "testing"))
    into_store = [
        f"{path.name}: {line.strip()}"
        for path in sorted((ROOT / "outlast" / "queue").rglob("*.py"))
        for line in path.read_text().splitlines()
        if "outlast.store" in line
    ]
    assert into_store == [], into_store
    assert not reaching("worker", ("producer", "cli", "dashboard", "testing"))
    # The engine (every worker module but the Worker's rooms, the pool and the package's exports)
    # never reaches back up into the Worker.
    rooms = ("loop", "intake", "claims", "acks", "heartbeat", "sweeper", "pool", "__init__")
    up = {f"outlast.worker.{room}" for room in rooms}
    engine = {m: names for m, names in imported("worker").items() if Path(m).stem not in rooms}
    assert len(engine) > 15
    assert not [f"{m} -> {n}" for m, names in engine.items() for n in sorted(names & up)]
    assert not reaching("producer", ("worker", "cli", "dashboard", "testing"))
    assert not reaching("dashboard", ("store", "queue", "worker", "cli"))
    assert not reaching("cli", ("store", "queue"))
