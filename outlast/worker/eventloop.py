"""This module sets what a worker process runs on: its event loop, and its garbage collector's pace.

uvloop, where it is installed, costs less per operation than asyncio's own loop (its callbacks,
timers and socket reads are in C); ``OUTLAST_EVENT_LOOP`` chooses: auto (uvloop if it imports),
uvloop (required), or asyncio; the loop chosen is named in the ``worker.started`` log line.

The collector: a draining worker spent about 15% of its CPU in it (gc.callbacks, 2,000 5-op
runs), half of that re-scanning what the process imported at start, which lives as long as the
process does. What is there when the worker starts is frozen out of the collections
(``gc.freeze``), and the youngest generation is collected every 20,000 allocations rather than
every 700: a run's objects mostly die by reference count long before that, so fewer survive to
be scanned again (that CPU fell to about a quarter).
"""

from __future__ import annotations

import asyncio
import gc
import importlib
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from outlast.errors import ConfigError

T = TypeVar("T")
GC_THRESHOLDS = (20_000, 20, 20)  # allocations before a young collection; then older ones


def loop_factory(choice: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """What makes the worker's loop for ``choice`` (None: asyncio's default)."""
    if choice == "asyncio":
        return None
    try:
        uvloop = importlib.import_module("uvloop")
    except ImportError as exc:
        if choice == "auto":
            return None
        raise ConfigError(
            f"OUTLAST_EVENT_LOOP=uvloop, but uvloop does not import ({exc}): pip install uvloop, "
            "or set OUTLAST_EVENT_LOOP=auto or asyncio"
        ) from None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def loop_name() -> str:
    """The running loop's kind, as the worker's start line shows it."""
    return "uvloop" if type(asyncio.get_running_loop()).__module__.startswith("uvloop") else "asyncio"


def run(main: Coroutine[Any, Any, T], choice: str) -> T:
    """``asyncio.run`` on the chosen loop, in a worker process."""
    with asyncio.Runner(loop_factory=loop_factory(choice)) as runner:
        return runner.run(main)


def pace_collector() -> None:
    """The collector paced as above: once the worker is built and its signals are handled (a
    SIGTERM during the collection here then stops it gracefully), before it serves."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
