"""One value per run and one per operation: the parts of a run are given its ``RunScope`` (plus the
store families they use), never the pieces one by one; an operation's arguments are sealed once, into
its ``Op``; and the workflow's ``Run`` exposes the workflow's API only, the engine's hooks being
``RunEngine``'s."""

from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path

import pytest

from outlast.store import FAMILIES
from outlast.worker import run as run_module

WORKER = Path(__file__).resolve().parents[2] / "outlast" / "worker"
# The parts of one run, each given the run's scope (its file, its class).
RUN_PARTS = {
    "waits.py": "Waits",
    "requests.py": "RunRequests",
    "children.py": "RunChildren",
    "shown.py": "RunShown",
    "dispatcher.py": "Dispatcher",
    "admission.py": "OperationAdmission",
    "gaps.py": "GapTable",
}
LOOSE = {"record", "control", "writes", "replayer", "secrets", "max_payload", "gate", "live", "app"}
FAMILY_TYPES = {kind.__name__ for kind in FAMILIES.values()} | {"CaptureReader"}
HOOKS = {"ended", "check_consumed", "compensate", "children_started", "settled"}


def doors(path: Path, cls: str) -> list[ast.arg]:
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for f in node.body:
                if isinstance(f, ast.FunctionDef) and f.name == "__init__":
                    return [*f.args.args[1:], *f.args.kwonlyargs]
    raise AssertionError(f"no {cls}.__init__ in {path.name}")


@pytest.mark.parametrize("file", sorted(RUN_PARTS))
def test_each_part_of_a_run_is_given_its_scope_not_the_pieces(file: str) -> None:
    given = doors(WORKER / file, RUN_PARTS[file])
    names = {a.arg for a in given}
    assert "scope" in names, f"{RUN_PARTS[file]} is not given the run's scope"
    assert not names & LOOSE, f"{RUN_PARTS[file]} is given {names & LOOSE} besides the scope"
    families = {
        a.arg for a in given if isinstance(a.annotation, ast.Name) and a.annotation.id in FAMILY_TYPES
    }
    extras = names - families - {"scope"}
    assert len(extras) <= 2, f"{RUN_PARTS[file]} is given {sorted(extras)} besides its scope and families"


def test_the_run_and_the_operation_values_are_frozen() -> None:
    from outlast.worker.op import Op
    from outlast.worker.scope import RunScope, RunTaken

    for kind in (RunScope, RunTaken, Op):
        assert dataclasses.is_dataclass(kind) and kind.__dataclass_params__.frozen  # type: ignore[attr-defined]


def test_an_operations_arguments_are_sealed_once() -> None:
    """The dispatcher seals where it makes the ``Op``; admission and the gap table never seal."""
    seals = {
        f: (WORKER / f).read_text().count(".seal(") for f in ("dispatcher.py", "admission.py", "gaps.py")
    }
    assert seals == {"dispatcher.py": 1, "admission.py": 0, "gaps.py": 0}


def test_the_workflows_run_has_no_engine_hooks() -> None:
    public = {name for name, _ in inspect.getmembers(run_module.Run) if not name.startswith("_")}
    assert not public & HOOKS, f"engine hooks on the workflow's Run: {public & HOOKS}"
    engine = getattr(run_module, "RunEngine", None)
    assert engine is not None and HOOKS - {"settled"} <= set(dir(engine))
