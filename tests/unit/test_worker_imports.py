"""A worker's memory: what ``outlast worker`` imports (in a fresh interpreter) leaves out what it
never needs on its path — the dashboard and its web stack, the metrics exporter (``--metrics-port``
imports it), the OpenTelemetry API when the app traces nothing — and what each held run keeps
is small (its record is slotted; its signals are flags, not Events with a waiters' queue)."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from outlast.model import Run, RunState
from outlast.worker.control import RunControl

ROOT = Path(__file__).resolve().parents[2]

# Imported on use only: a worker that does not use them does not pay for them.
LAZY = (
    "opentelemetry.propagate",  # outlast.tracing: only once the app loaded the API (a provider)
    "outlast.dashboard",
    "starlette",
    "uvicorn",
    "jinja2",
    "prometheus_client",
    "outlast.embedded",
    "outlast.testing",
)


def test_the_worker_command_leaves_out_what_it_never_needs() -> None:
    # What `outlast worker` imports before serving: the CLI, the worker, the services' check.
    code = "import sys, outlast.cli, outlast.worker, outlast.services; print('\\n'.join(sys.modules))"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True
    )
    loaded = set(done.stdout.split())
    assert "outlast.worker.loop" in loaded
    assert not [m for m in LAZY if m in loaded or any(x.startswith(m + ".") for x in loaded)]


def test_a_held_run_keeps_slotted_records_and_plain_flags() -> None:
    at = datetime.now(UTC)
    record = Run(
        **{
            **dict.fromkeys(Run.__dataclass_fields__),
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
    control = RunControl("r", 1, cancel=True)
    assert control.cancel.is_set() and not control.stop.is_set() and not control.lost.is_set()
    for signal in (control.stop, control.cancel, control.lost):
        assert not hasattr(signal, "__dict__") and not hasattr(signal, "_waiters")
