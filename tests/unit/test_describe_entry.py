"""A refusal on resume names what the journal holds at the crossing. A read journals no
intention: its result, or its abandonment (a cancellation outlived its grace), says what it asked,
and is named as the call it was."""

from __future__ import annotations

from outlast._journal import make_entry
from outlast.worker.journaled import describe_entry

ASKED = {"tool": "lookup", "args": {"q": "tides"}, "args_hash": "h", "started": "t", "token": 1}


def test_a_read_is_named_by_what_it_asked() -> None:
    result = make_entry("", 1, "result", "op-1", {"ok": 1, **ASKED})
    abandoned = make_entry("", 1, "abandoned", "op-1", {"why": "abandoned: cancelled", **ASKED})
    assert describe_entry(result) == 'lookup({"q":"tides"})'
    assert describe_entry(abandoned) == 'lookup({"q":"tides"})'
