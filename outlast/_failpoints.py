"""Failpoints are named crash points for crash tests. Inert unless armed (``OUTLAST_FAILPOINTS``, read once
into the settings and passed to ``arm``). Hitting an armed point kills the process at once:
no cleanup, no ``finally``, as a power cut would.

Spec: ``name`` or ``name:tool``, comma-separated, e.g. ``after_effect:transfer,before_ack``.
"""

from __future__ import annotations

import os
import signal
import sys

POINTS = frozenset(
    {
        "before_intention",
        "after_intention",
        "after_effect",
        "after_result",
        "with_result_held",  # a read's or an idempotent tool's result held, not yet written
        # name:what (finish, wait, park, slot, reserve, child, release, publish, withdraw, carry;
        # cancel, in_doubt: the journal entries that carry held results)
        "after_fenced_write",
        "before_ack",
        "after_final",
        "before_child_journaled",  # a child run committed, its start not yet journaled in the parent
        "after_shown",  # name:what (state, event): a set_state or emit committed, the workflow not on yet
        "after_take",  # a message taken and journaled (committed), the workflow not yet given it
        "after_send",  # a producer's send committed, its run not yet published (the wake-up)
        "after_payload_stored",  # a value in the payload store, the entry referring to it not journaled
    }
)

_armed: set[tuple[str, str | None]] = set()


def arm(spec: str) -> None:
    """Arm the points in ``spec`` (replacing any armed before)."""
    _armed.clear()
    for item in filter(None, (s.strip() for s in spec.split(","))):
        name, _, tool = item.partition(":")
        if name not in POINTS:
            raise ValueError(f"unknown failpoint {name!r}; known: {', '.join(sorted(POINTS))}")
        _armed.add((name, tool or None))


def hit(name: str, tool: str | None = None) -> None:
    """Die here if this point (for this tool, or for any tool) is armed."""
    if not _armed:
        return
    if (name, None) in _armed or (tool is not None and (name, tool) in _armed):
        sys.stderr.write(f"outlast: failpoint {name}{':' + tool if tool else ''} hit, killing process\n")
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)
