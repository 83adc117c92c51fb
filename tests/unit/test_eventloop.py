"""The worker process's event loop (uvloop where it imports) and its collector's pace."""

from __future__ import annotations

import asyncio
import importlib
import subprocess
import sys
from typing import Any

import pytest

from outlast.errors import ConfigError
from outlast.worker import eventloop


def test_asyncio_is_asyncios_own_loop() -> None:
    assert eventloop.loop_factory("asyncio") is None

    async def kind() -> str:
        return eventloop.loop_name()

    with asyncio.Runner(loop_factory=eventloop.loop_factory("asyncio")) as r:
        assert r.run(kind()) == "asyncio"


def test_uvloop_runs_the_worker_where_it_imports() -> None:
    pytest.importorskip("uvloop", reason="uvloop has no build for this platform")

    async def kind() -> str:
        return eventloop.loop_name()

    for choice in ("auto", "uvloop"):
        with asyncio.Runner(loop_factory=eventloop.loop_factory(choice)) as r:
            assert r.run(kind()) == "uvloop"


def test_without_uvloop_auto_falls_back_and_uvloop_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.import_module

    def no_uvloop(name: str, *args: Any) -> Any:
        if name == "uvloop":
            raise ImportError("No module named 'uvloop'")
        return real(name, *args)

    monkeypatch.setattr(eventloop.importlib, "import_module", no_uvloop)
    assert eventloop.loop_factory("auto") is None
    with pytest.raises(
        ConfigError, match=r"OUTLAST_EVENT_LOOP=uvloop, but uvloop does not import.*pip install uvloop"
    ):
        eventloop.loop_factory("uvloop")


def test_a_worker_process_freezes_what_it_imported_and_collects_less_often() -> None:
    # In a process of its own: the collector's settings are the whole process's.
    code = (
        "import gc, asyncio\n"
        "from outlast.worker import eventloop\n"
        "async def main():\n"
        "    eventloop.pace_collector()\n"
        "    return gc.get_freeze_count(), gc.get_threshold()\n"
        "frozen, thresholds = eventloop.run(main(), 'asyncio')\n"
        "assert frozen > 1000, frozen\n"
        "assert thresholds == eventloop.GC_THRESHOLDS, thresholds\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
