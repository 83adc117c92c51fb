"""A worker's memory: what ``outlast worker`` imports (in a fresh interpreter) leaves out what it
never needs on its path — the dashboard and its web stack, the metrics exporter (``--metrics-port``
imports it), the OpenTelemetry API when the app traces nothing, the producer, the other families
of commands —, what each held run keeps is small (its record is slotted; its signals are flags,
not Events with a waiters' queue), and the writer keeps no batch (parameters, rows) once it is
committed."""

from __future__ import annotations

import asyncio
import gc
import subprocess
import sys
import weakref
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from outlast._model import RunRecord, RunState
from outlast.cli.group import FAMILIES
from outlast.errors import ServiceUnavailable
from outlast.store import lane as writer_module
from outlast.store.writer import Writer
from outlast.worker.control import RunControl

ROOT = Path(__file__).resolve().parents[2]

# Imported on use only: a worker that does not use them does not pay for them.
LAZY = (
    "opentelemetry.propagate",  # outlast._tracing: only once the app loaded the API (a provider)
    "outlast.dashboard",
    "starlette",
    "uvicorn",
    "jinja2",
    "prometheus_client",
    "outlast._embedded",
    "outlast.testing",
)


def _imported(modules: str) -> set[str]:
    code = f"import sys, {modules}; print('\\n'.join(sys.modules))"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True
    )
    return set(done.stdout.split())


def _among(lazy: tuple[str, ...], loaded: set[str]) -> list[str]:
    return [m for m in lazy if m in loaded or any(x.startswith(m + ".") for x in loaded)]


# Nor does a worker need the producer (``outlast.Client``, ``AsyncClient``: imported on first use).
PRODUCER = ("outlast.producer", "outlast.identity", "outlast._approvals")
OTHER_FAMILIES = tuple(f"outlast.cli.{name}" for name in FAMILIES if name != "worker")


def test_the_worker_command_leaves_out_what_it_never_needs() -> None:
    # What `outlast worker` imports before serving: the CLI, the worker, the services' check.
    loaded = _imported("outlast.cli, outlast.worker, outlast.services")
    assert {"outlast.worker.loop", "outlast.cli.worker"} <= loaded
    assert not _among((*LAZY, *PRODUCER, *OTHER_FAMILIES), loaded)


def test_a_worker_leaves_out_the_producer() -> None:
    # A worker process (``serve``'s children; a Worker made in code).
    loaded = _imported("outlast.worker")
    assert "outlast.worker.loop" in loaded
    assert not _among((*LAZY, *PRODUCER), loaded)


def test_every_family_of_commands_is_found_on_need() -> None:
    here = {p.stem for p in (ROOT / "outlast" / "cli").glob("*.py")} - {"__init__", "common", "group"}
    assert set(FAMILIES) == here


def test_a_held_run_keeps_slotted_records_and_plain_flags() -> None:
    at = datetime.now(UTC)
    record = RunRecord(
        **{
            **dict.fromkeys(RunRecord.__dataclass_fields__),
            "id": "r",
            "workflow": "w",
            "queue": "default",
            "input": {},
            "state": RunState.RUNNING,
            "fencing_token": 1,
            "attempts": 1,
            "cancel_requested": False,
            "journal_head": "",
            "journal_len": 0,
            "created_at": at,
            "updated_at": at,
            "trace_context": None,
            "priority": "normal",
            "held_back": False,
        }
    )
    assert not hasattr(record, "__dict__")  # 34 fields: past the dict key sharing, ~1.3 KB more
    assert record.to_dict()["created_at"] == at.isoformat()
    control = RunControl(run_id="r", token=1, cancel=True)
    assert control.cancel.is_set() and not control.stop.is_set() and not control.lost.is_set()
    for signal in (control.stop, control.cancel, control.lost):
        assert not hasattr(signal, "__dict__") and not hasattr(signal, "_waiters")


class _Row:
    """A row the writer hands back: weakly referenced, to see who keeps it."""


class _Conn:
    closed = broken = False
    pgconn = type("P", (), {"pipeline_status": writer_module.pq.PipelineStatus.OFF})()
    info = type("I", (), {"transaction_status": writer_module.TransactionStatus.IDLE})()


class _Wire:
    def __init__(self, conn: Any) -> None:
        self.rows: list[weakref.ref[_Row]] = []

    def dump(self, sql: str, params: dict[str, Any]) -> Any:
        return type("D", (), {"size": 1})()

    async def transaction(self, batch: list[Any]) -> list[list[Any]]:
        out = [[_Row()] for _ in batch]
        self.rows += [weakref.ref(rows[0]) for rows in out]
        return out


async def test_the_writer_keeps_no_batch_once_committed() -> None:
    wires: list[_Wire] = []

    async def connect() -> Any:
        return _Conn()

    def make_wire(conn: Any) -> Any:
        wires.append(_Wire(conn))
        return wires[-1]

    w = Writer(connect, lambda exc: ServiceUnavailable(str(exc)), 5.0, make_wire=make_wire)
    await asyncio.gather(*(w.write("claim", {"input": "x" * 100}, key=f"run-{i}") for i in range(20)))
    await asyncio.sleep(0)  # the writer waits for its next write
    gc.collect()
    assert len(wires[-1].rows) == 20 and not [r for r in wires[-1].rows if r() is not None]
    await w.close()
