"""The import graph of ``outlast/`` (every ``import`` read with ``ast``, those under
``TYPE_CHECKING`` and inside functions included): no module of the worker's engine or parts reaches
up into ``outlast.worker.loop``; no cycle among outlast's modules; and the queue and the store
never reach one another, directly or through a module between them (a helper both need lives
below both, as ``outlast/_urls.py`` does)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LOOP = "outlast.worker.loop"
# Above the loop, not below it: the package's public names, and the pool that runs Workers in
# processes. Every other module under outlast/worker is a part the loop composes, or the engine.
ABOVE_LOOP = {"outlast.worker", "outlast.worker.pool"}


def module_of(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(root: Path = ROOT) -> dict[str, Path]:
    return {module_of(p, root): p for p in sorted((root / "outlast").rglob("*.py"))}


def _known(name: str, known: dict[str, Path]) -> str | None:
    """``name`` if it is one of outlast's modules, else the package that holds it (an attribute
    imported from a package), else None (outside outlast)."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The outlast modules ``module`` imports (``from a.b import c``: ``a.b.c`` when it is a module)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *([base] if base else [])])
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        found |= {m for n in names if n.startswith("outlast") and (m := _known(n, known)) is not None}
    return found - {module}


def graph(root: Path = ROOT) -> dict[str, set[str]]:
    known = modules(root)
    return {m: imports_of(m, p, known) for m, p in known.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def reached(edges: dict[str, set[str]], start: str) -> set[str]:
    """Every module ``start`` imports, directly or through others."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        for n in edges.get(todo.pop(), ()):
            if n not in seen:
                seen.add(n)
                todo.append(n)
    return seen


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def crossings(edges: dict[str, set[str]], source: str, target: str) -> list[str]:
    """``m -> n``: a module of package ``source`` whose import ``n`` (from outside ``source``) is
    of package ``target``, or reaches it."""
    return [
        f"{m} -> {n}"
        for m in sorted(edges)
        if _inside(m, source)
        for n in sorted(edges[m])
        if not _inside(n, source)
        and (_inside(n, target) or any(_inside(r, target) for r in reached(edges, n)))
    ]


def loop_importers(edges: dict[str, set[str]]) -> list[str]:
    return sorted(
        m
        for m, names in edges.items()
        if m.startswith("outlast.worker") and m != LOOP and m not in ABOVE_LOOP and LOOP in names
    )


def test_no_part_of_the_worker_imports_the_loop() -> None:
    edges = graph()
    assert len([m for m in edges if m.startswith("outlast.worker.")]) > 25
    assert LOOP in edges["outlast.worker.pool"]  # seen where it is imported
    assert not loop_importers(edges), "these reach up into the Worker: give them what they use instead"


def test_the_import_graph_has_no_cycle() -> None:
    found = cycles(graph())
    assert not found, f"import cycles among outlast's modules: {found}"


def layers(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    """The graph of outlast's layers: each top-level module or package one node."""
    top = lambda m: ".".join(m.split(".")[:2])  # noqa: E731
    out: dict[str, set[str]] = {}
    for m, names in edges.items():
        out.setdefault(top(m), set()).update(top(n) for n in names if top(n) != top(m))
    return out


def test_the_layers_have_no_cycle() -> None:
    # Between packages too: queue -> store (a helper) and store -> listing -> queue made one.
    found = cycles(layers(graph()))
    assert not found, f"import cycles among outlast's packages and top-level modules: {found}"


def test_the_queue_and_the_store_do_not_reach_each_other() -> None:
    edges = graph()
    assert not crossings(edges, "outlast.queue", "outlast.store")
    assert not crossings(edges, "outlast.store", "outlast.queue")


def test_the_checks_see_what_they_look_for() -> None:
    # A made-up graph: a cycle of three, a part importing the loop, the store reaching the queue
    # through a module of neither.
    edges = {
        "outlast.a": {"outlast.b"},
        "outlast.b": {"outlast.c"},
        "outlast.c": {"outlast.a"},
        "outlast.worker.intake": {LOOP},
        LOOP: {"outlast.worker.intake"},
        "outlast.worker.pool": {LOOP},
        "outlast.store.listing": {"outlast._listing"},
        "outlast._listing": {"outlast.queue.entries"},
        "outlast.queue.entries": set(),
    }
    assert sorted(cycles(edges)) == [["outlast.a", "outlast.b", "outlast.c"], ["outlast.worker.intake", LOOP]]
    assert loop_importers(edges) == ["outlast.worker.intake"]
    assert crossings(edges, "outlast.store", "outlast.queue") == ["outlast.store.listing -> outlast._listing"]
    assert not crossings(edges, "outlast.queue", "outlast.store")
    assert cycles(layers(edges)) == [["outlast.a", "outlast.b", "outlast.c"]]  # the worker's is inside


def test_imports_under_type_checking_and_in_functions_are_read(tmp_path: Path) -> None:
    pkg = tmp_path / "outlast"
    (pkg / "worker").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "worker" / "__init__.py").write_text("")
    (pkg / "worker" / "loop.py").write_text("from outlast.worker import intake\n")
    (pkg / "worker" / "intake.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from outlast.worker.loop import Worker\n"
    )
    (pkg / "worker" / "claims.py").write_text("def f():\n    from .loop import Worker\n")
    edges = graph(tmp_path)
    assert edges["outlast.worker.loop"] == {"outlast.worker.intake"}
    assert edges["outlast.worker.intake"] == {LOOP}
    assert edges["outlast.worker.claims"] == {LOOP}
    assert cycles(edges) == [["outlast.worker.intake", LOOP]]


# The public door (``outlast/__init__.py``'s docstring): every other top-level module is marked
# internal by a leading underscore.
PUBLIC = {"__init__", "__main__", "action", "app", "errors", "fence", "settings", "identity", "services"}
PUBLIC |= {"demo", "demo_app", "demo_agent", "demo_agent_app", "agents"}


def test_a_top_level_module_is_public_by_name_or_marked_internal() -> None:
    unmarked = sorted(
        p.stem for p in (ROOT / "outlast").glob("*.py") if not p.stem.startswith("_") or p.stem == "__init__"
    )
    assert set(unmarked) - PUBLIC == set(), "name it in outlast/__init__.py's docstring, or start it with _"
    door = (ROOT / "outlast" / "__init__.py").read_text()
    assert all(f"``outlast.{name}``" in door for name in PUBLIC - {"__init__", "__main__"})
