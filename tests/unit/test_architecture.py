"""ARCHITECTURE.md stays one page a person reads: at most 1,500 words, a code map of one short line
per part, every relative link leading to a file that exists, and each "Architecture invariant"
about an import that is absent still true of the code.

The detail of each part lives in its package's or module's docstring, beside the code it describes.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "ARCHITECTURE.md"
MAX_WORDS = 1500
MAX_LINE = 120

LINK = re.compile(r"\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)[^)]*\)")


def words(text: str) -> int:
    """The page's words as ``wc -w`` counts them: a link or a code span without spaces is one."""
    return len(text.split())


def code_map(text: str) -> list[str]:
    """The lines of the code map: each ``- `` entry under ``## Code map``, up to the next section."""
    section = text.partition("\n## Code map\n")[2].partition("\n## ")[0]
    return [line for line in section.splitlines() if line.startswith("- ")]


def broken_links(text: str, base: Path) -> list[str]:
    """The relative links of ``text`` whose file (read from ``base``) does not exist."""
    broken = []
    for m in LINK.finditer(text):
        target = m[1].partition("#")[0]
        if target and "://" not in target and not target.startswith("mailto:"):
            if not (base / target).exists():
                broken.append(m[1])
    return broken


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


def test_the_page_is_one_page() -> None:
    n = words(PAGE.read_text())
    assert n <= MAX_WORDS, f"ARCHITECTURE.md has {n} words (at most {MAX_WORDS}): move detail into docstrings"


def test_each_code_map_line_is_short_and_names_a_real_part() -> None:
    lines = code_map(PAGE.read_text())
    assert len(lines) >= 20, "ARCHITECTURE.md needs a '## Code map' of '- `path` ...' lines, one per part"
    long = [f"{len(line)}: {line[:60]}..." for line in lines if len(line) > MAX_LINE]
    assert not long, f"code map lines over {MAX_LINE} characters:\n" + "\n".join(long)
    for line in lines:
        m = re.match(r"- `([^`]+)`", line)
        assert m, f"a code map line opens with the part's path in backquotes: {line}"
        for part in m[1].split(", "):
            assert (ROOT / "outlast" / part).exists(), f"the code map names outlast/{part}: no such file"


def test_every_relative_link_leads_to_a_file() -> None:
    broken = broken_links(PAGE.read_text(), ROOT)
    assert not broken, f"ARCHITECTURE.md links to files that do not exist: {broken}"


def test_the_link_check_finds_a_broken_link(tmp_path: Path) -> None:
    (tmp_path / "here.py").write_text("")
    text = "[ok](here.py) [ok too](here.py#L3) [web](https://example.com) [gone](nowhere.py)"
    assert broken_links(text, tmp_path) == ["nowhere.py"]


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
