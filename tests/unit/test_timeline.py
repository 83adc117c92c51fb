"""The run page's timeline as a pure function: a synthetic journal with a retried read, an approval
with its decider, a handover to a new fencing token and an in-doubt gap left open, read into bars
and drawn as SVG with every label escaped."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from outlast._journal import Entry, make_entry
from outlast.dashboard.timeline import read, svg

T0 = datetime(2026, 1, 1, tzinfo=UTC)
XSS = "<script>alert(1)</script>"
DECIDED = (T0 + timedelta(seconds=9)).isoformat()


def journal(*rows: tuple[float, str, str | None, dict[str, Any]]) -> tuple[list[Entry], dict[int, datetime]]:
    entries: list[Entry] = []
    times: dict[int, datetime] = {}
    for at, kind, op, data in rows:
        e = make_entry(entries[-1].hash if entries else "", len(entries) + 1, kind, op, data)
        entries.append(e)
        times[e.seq] = T0 + timedelta(seconds=at)
    return entries, times


def intention(tool: str, token: int, args_hash: str = "h1") -> dict[str, Any]:
    return {"tool": tool, "args": {}, "args_hash": args_hash, "key": "k", "token": token}


ENTRIES, TIMES = journal(
    (0, "intention", "op-1", intention("fetch", 1)),
    (1, "result", "op-1", {"error": {"type": "ConnectionError", "message": "dropped"}}),
    (2, "intention", "op-2", intention("fetch", 1)),
    (3, "result", "op-2", {"ok": 1}),
    (4, "approval", "op-3", {"action": "publish", "args": {}, "args_hash": "h2", "approvers": ["ops"]}),
    (10, "decision", "op-3", {"status": "approved", "by": "alice", "at": DECIDED}),
    (11, "intention", "op-4", intention(XSS, 2)),
    (11.5, "capture", "op-4", {"request": {"prompt": "hi"}}),
    (12, "in_doubt", "op-4", {"why": "timed out", "traceback": ""}),
)
EVENTS = [
    {"at": T0 + timedelta(seconds=5), "kind": "waiting", "detail": {"reason": "rate_limit", "message": "m"}},
    {"at": T0 + timedelta(seconds=7), "kind": "resumed", "detail": {}},
    {"at": T0 + timedelta(seconds=10.5), "kind": "handed_over", "detail": {"message": "lease expired"}},
]


def test_bars_of_a_retry_an_approval_a_handover_and_an_in_doubt_gap() -> None:
    bars, markers = read(ENTRIES, TIMES, EVENTS)
    got = [(b.kind, b.op, b.token, b.start - T0, None if b.end is None else b.end - T0) for b in bars]
    s = timedelta(seconds=1)
    assert got == [
        ("operation", "op-1", 1, 0 * s, 1 * s),
        ("retry", "op-2", 1, 2 * s, 3 * s),
        ("approval", "op-3", 1, 4 * s, 9 * s),  # decided at 9s (the decision's own time), journaled at 10s
        ("wait", None, None, 5 * s, 7 * s),  # a rate limit: only its events tell of it
        ("operation", "op-4", 2, 11 * s, 12 * s),
        ("in_doubt", "op-4", 2, 12 * s, None),  # still in doubt: open-ended
    ]
    assert bars[0].failed and bars[1].note == "retry of op-1"
    assert bars[2].note == "approved by alice"
    assert bars[3].label == "wait: rate_limit" and bars[4].captured and not bars[0].captured
    assert [(m.kind, m.at - T0) for m in markers] == [("handover", 10.5 * s), ("handover", 11 * s)]
    assert "fencing token 1 -> 2" in markers[1].note


def test_a_resolution_closes_the_gap_and_a_redispatch_is_marked() -> None:
    entries, times = journal(
        (0, "intention", "op-1", intention("charge", 1)),
        (1, "in_doubt", "op-1", {"why": "timed out"}),
        (5, "resolution", "op-1", {"executed": False}),
        (6, "redispatch", "op-1", {"how": "resolved not executed"}),
        (7, "result", "op-1", {"ok": 1}),
    )
    bars, markers = read(entries, times)
    gap = next(b for b in bars if b.kind == "in_doubt")
    assert gap.end == T0 + timedelta(seconds=5) and "not executed" in gap.note
    assert bars[0].redispatched == [T0 + timedelta(seconds=6)] and bars[0].end == T0 + timedelta(seconds=7)
    assert [m.kind for m in markers] == ["redispatch"]


def test_the_svg_escapes_labels_draws_open_bars_and_links_captures() -> None:
    bars, markers = read(ENTRIES, TIMES, EVENTS)
    drawn = svg(bars, markers, T0 + timedelta(seconds=20), lambda op: f"#capture-{op}")
    assert drawn.startswith("<svg") and drawn.endswith("</svg>")
    assert "<script" not in drawn and "&lt;script&gt;" in drawn
    assert drawn.count('<g class="bar ') == 6 and drawn.count('class="bar in_doubt open"') == 1
    assert 'class="bar retry"' in drawn and 'class="bar operation failed"' in drawn
    assert "approved by alice" in drawn and "fencing token 2" in drawn
    assert drawn.count('<g class="marker handover">') == 2
    assert '<a href="#capture-op-4">' in drawn
    assert svg([], [], T0) == ""
