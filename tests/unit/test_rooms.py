"""Every room owns one thing: no module under outlast/worker, store, queue or producer is longer
than 300 lines, and no class defined there has more than 25 methods (functions in its body)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).parents[2] / "outlast"
ROOMS = ("worker", "store", "queue", "producer")
MAX_LINES = 300
MAX_METHODS = 25


def too_big(path: Path) -> set[str]:
    """What in ``path`` breaks the limits: ``lines``, and the name of each class with too many methods."""
    text = path.read_text()
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
