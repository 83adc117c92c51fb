"""Every log line's event is a constant name from ``outlast._log_events``; the details ride as keys.

The test reads every module under ``outlast/`` with ``ast``: a call to a logger's level method
(``log.info(...)``, ``self._log.bind(...).warning(...)``) or to a name bound from one
(``say = self._log.bind(...).info``; ``say(...)``) must pass, as its first argument, a plain string
that ``outlast._log_events.EVENTS`` names. An f-string, a variable or an unknown name fails it.
"""

from __future__ import annotations

import ast
import json
import logging
from pathlib import Path

import pytest
import structlog

from outlast import _logs as logs
from outlast._log_events import EVENTS

ROOT = Path(__file__).resolve().parents[2] / "outlast"
LEVELS = {"debug", "info", "warning", "warn", "error", "exception", "critical", "msg", "fatal"}


def _is_logger(node: ast.expr) -> bool:
    """``log``, ``self._log``, ``ex.log``, ``log.bind(...)``, ``structlog.get_logger(...)``."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        if node.func.attr in ("bind", "new", "get_logger"):
            return True
    if isinstance(node, ast.Name):
        return "log" in node.id.lower()
    if isinstance(node, ast.Attribute):
        return "log" in node.attr.lower()
    return False


def _level_method(node: ast.expr) -> bool:
    return isinstance(node, ast.Attribute) and node.attr in LEVELS and _is_logger(node.value)


def offenders(tree: ast.AST, where: str) -> list[str]:
    """Each logging call of ``tree`` whose event is not a known constant, as ``where:line: why``."""
    aliases: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and _level_method(node.value):
            aliases |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if not (_level_method(func) or (isinstance(func, ast.Name) and func.id in aliases)):
            continue
        event = node.args[0] if node.args else None
        if not (isinstance(event, ast.Constant) and isinstance(event.value, str)):
            shown = ast.unparse(event) if event is not None else "no event"
            found.append(f"{where}:{node.lineno}: event is not a string constant: {shown}")
        elif event.value not in EVENTS:
            found.append(f"{where}:{node.lineno}: {event.value!r} is not named in outlast._log_events")
    return found


def test_every_log_event_is_a_named_constant() -> None:
    bad = []
    for path in sorted(ROOT.rglob("*.py")):
        bad += offenders(ast.parse(path.read_text()), str(path.relative_to(ROOT.parent)))
    assert not bad, "log events must be constant names from outlast._log_events:\n" + "\n".join(bad)


def test_the_check_catches_fstrings_variables_and_aliases() -> None:
    source = """
log.info(f"run {run_id} finished")
self._log.bind(tool=t).warning(message)
say = self._log.bind(tool=t).info
say(f"gap {op} resolved")
log.info("run.finished", run_id=1)
print(f"not a log {x}")
"""
    bad = offenders(ast.parse(source), "x.py")
    assert [b.split(":")[1] for b in bad] == ["2", "3", "5"], bad


def test_every_event_name_is_dotted_and_explained() -> None:
    for name, meaning in EVENTS.items():
        assert name.count(".") >= 1 and name == name.lower() and " " not in name, name
        assert meaning.strip(), name


@pytest.mark.parametrize("on", [False, True])
def test_payload_keys_reach_a_log_line_only_with_payloads_on(
    on: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    logs.configure("json")
    logs.show_payloads(on)
    try:
        structlog.get_logger("t").info(
            "operation.returned", operation_id="op-1", result={"paid": 5}, args={"a": 1}
        )
        line = json.loads(capsys.readouterr().err)
    finally:
        logs.show_payloads(False)
        structlog.reset_defaults()
    assert line["event"] == "operation.returned" and line["operation_id"] == "op-1"
    if on:
        assert line["result"] == {"paid": 5} and line["args"] == {"a": 1}
    else:
        assert "result" not in line and "args" not in line


def test_the_docs_table_names_every_event() -> None:
    from tests.unit.test_docs import load_hooks

    page = ROOT.parent / "docs" / "reference" / "logs.md"
    assert "<!-- outlast:logs -->" in page.read_text().splitlines()
    table = load_hooks().logs_reference()
    for name, what in EVENTS.items():
        assert f"| `{name}` | {what} |" in table, name


def test_a_librarys_own_log_record_is_a_json_line(capsys: pytest.CaptureFixture[str]) -> None:
    """psycopg_pool logs its failed connection attempts through the standard library: in JSON mode
    they are JSON lines too, not plain text in the middle of the log."""
    logs.configure("json")
    try:
        logging.getLogger("psycopg.pool").warning("error connecting in %r: %s", "pool-1", "refused")
        err = capsys.readouterr().err
    finally:
        logs.route_libraries(False)
        structlog.reset_defaults()
    lines = err.splitlines()
    assert len(lines) == 1, err
    line = json.loads(lines[0])
    assert line["event"] == "library.log" and line["logger"] == "psycopg.pool"
    assert line["message"] == "error connecting in 'pool-1': refused" and line["level"] == "warning"
