"""Every room owns one thing: no module under outlast/worker, store, queue or producer is longer
than 300 lines, and no class defined there has more than 25 methods (functions in its body). A room
may pass these caps when it says why, in itself: a line ``# rooms: <reason>`` (at least eight words),
which a reader meets at the top of the file. What a part can reach is measured by
``test_part_reach.py``."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).parents[2] / "outlast"
ROOMS = ("worker", "store", "queue", "producer")
MAX_LINES = 300
MAX_METHODS = 25
PASS = re.compile(r"^# rooms: (.+)$", re.MULTILINE)
MIN_REASON_WORDS = 8


def reason(text: str) -> str | None:
    """The reason a room gives for passing its caps, if it gives one long enough to say something."""
    found = PASS.search(text)
    if found is None or len(found.group(1).split()) < MIN_REASON_WORDS:
        return None
    return found.group(1)


def too_big(path: Path) -> set[str]:
    """What in ``path`` breaks the limits: ``lines``, and the name of each class with too many methods."""
    text = path.read_text()
    if reason(text) is not None:
        return set()
    over = {"lines"} if len(text.splitlines()) > MAX_LINES else set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ClassDef):
            methods = [f for f in node.body if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)]
            if len(methods) > MAX_METHODS:
                over.add(node.name)
    return over


def modules() -> dict[str, set[str]]:
    return {
        str(p.relative_to(ROOT)): too_big(p) for room in ROOMS for p in sorted((ROOT / room).rglob("*.py"))
    }


def test_every_module_and_class_is_small() -> None:
    found = modules()
    assert found, f"no modules found under {ROOT}"
    over = {m: what for m, what in found.items() if what}
    assert not over, f"over {MAX_LINES} lines or {MAX_METHODS} methods in a class: split the room: {over}"


def test_the_limits_are_measured(tmp_path: Path) -> None:
    wide = "class Wide:\n" + "".join(f"    def m{i}(self) -> None: ...\n" for i in range(MAX_METHODS + 1))
    (tmp_path / "wide.py").write_text(wide + "\n" * MAX_LINES)
    (tmp_path / "fine.py").write_text("class Fine:\n    def m(self) -> None: ...\n")
    assert too_big(tmp_path / "wide.py") == {"lines", "Wide"}
    assert too_big(tmp_path / "fine.py") == set()


def test_a_room_passes_its_caps_only_with_a_reason_stated_in_it(tmp_path: Path) -> None:
    wide = "class Wide:\n" + "".join(f"    def m{i}(self) -> None: ...\n" for i in range(MAX_METHODS + 1))
    (tmp_path / "short.py").write_text("# rooms: too long\n" + wide)
    (tmp_path / "said.py").write_text(
        "# rooms: the run's wiring, until one value per run replaces it\n" + wide
    )
    assert too_big(tmp_path / "short.py") == {"Wide"}  # a reason of three words is none
    assert too_big(tmp_path / "said.py") == set()


def test_the_rooms_that_pass_say_why() -> None:
    """Each room over its caps is listed with its reason (a newcomer reads them here at once)."""
    passing = {
        str(p.relative_to(ROOT)): reason(p.read_text())
        for room in ROOMS
        for p in sorted((ROOT / room).rglob("*.py"))
        if PASS.search(p.read_text())
    }
    assert all(passing.values()), f"a pass with no reason of {MIN_REASON_WORDS} words: {passing}"
