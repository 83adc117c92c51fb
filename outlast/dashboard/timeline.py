"""The run page's timeline shows a run's journal (with the time each crossing was journaled) and its
events, read into bars, then drawn as SVG on the server (no script, no library).

A bar is one operation from its start (its intention, or a `started` time its result carries)
to its outcome; a wait (timer, child run, concurrency slot, rate limit) from when the run began
waiting to when it went on; an approval from its request to its decision, with its decider; an
in-doubt gap from the moment the outcome became unknown to its resolution. A bar with no end yet
is open: drawn to the right edge, dashed. Each operation carries the fencing token of the worker
that dispatched it; a handover (a change of token between operations, or a ``handed_over`` or
``requeued`` event) is a marker, and so is a re-dispatch of an operation left without an outcome.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from html import escape
from typing import Any

from outlast._journal import Entry

WIDTH, LABELS, ROW, TOP = 960, 260, 20, 24
WAITED = ("concurrency_slot", "rate_limit")  # waits only an event tells of (not the journal)
HANDOVERS = ("handed_over", "requeued")


@dataclass
class Bar:
    """A ``Bar`` is one lane of the timeline."""

    label: str
    kind: str  # operation, retry, wait, approval, in_doubt
    start: datetime
    end: datetime | None = None  # None: still open (pending, waiting, in doubt)
    op: str | None = None
    token: int | None = None
    note: str = ""
    failed: bool = False
    captured: bool = False
    redispatched: list[datetime] = field(default_factory=list)


@dataclass(frozen=True)
class Marker:
    """A ``Marker`` marks a moment across every lane: a handover between workers, with the new
    fencing token."""

    at: datetime
    kind: str
    note: str


def _when(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            return None
    return None


class _Reader:
    """``_Reader`` holds the bars read so far, crossing by crossing (one method per kind of crossing)."""

    def __init__(self) -> None:
        self.bars: list[Bar] = []
        self.markers: list[Marker] = []
        self.by_op: dict[str, Bar] = {}
        self.gaps: dict[str, Bar] = {}
        self.children: dict[str, Bar] = {}
        self.failed: dict[tuple[str, str], Bar] = {}  # (tool, args hash) of a failed operation
        self.hashes: dict[str, tuple[str, str]] = {}  # op -> (tool, args hash)
        self.token: int | None = None

    def add(self, bar: Bar, op: str) -> None:
        self.by_op[op] = bar
        self.bars.append(bar)

    def intention(self, at: datetime, op: str, d: dict[str, Any]) -> None:
        tok = d.get("token")
        if self.token is not None and tok is not None and tok != self.token:
            self.markers.append(Marker(at, "handover", f"fencing token {self.token} -> {tok}"))
        self.token = tok if tok is not None else self.token
        bar = Bar(f"{d.get('tool', '?')} {op}", "operation", at, op=op, token=tok)
        self.hashes[op] = (str(d.get("tool")), str(d.get("args_hash")))
        earlier = self.failed.pop(self.hashes[op], None)
        if earlier is not None:
            bar.kind, bar.note = "retry", f"retry of {earlier.op}"
        self.add(bar, op)

    def redispatch(self, at: datetime, op: str, d: dict[str, Any]) -> None:
        if op in self.by_op:
            self.by_op[op].redispatched.append(at)
            self.markers.append(Marker(at, "redispatch", f"{op} re-dispatched ({d.get('how', '')})"))

    def result(self, at: datetime, op: str, d: dict[str, Any]) -> None:
        if op not in self.by_op and "tool" in d:  # a read's result is its own intention
            self.intention(_when(d.get("started")) or at, op, d)
        if op not in self.by_op:
            return
        bar = self.by_op[op]
        bar.start, bar.end = _when(d.get("started")) or bar.start, at
        if "error" in d:
            bar.failed = True
            bar.note = (bar.note + "; " if bar.note else "") + f"error: {d['error'].get('type', '')}"
            self.failed[self.hashes.get(op, ("", ""))] = bar
        if op in self.gaps and self.gaps[op].end is None:  # a late result settles the gap
            self.gaps[op].end = at

    def in_doubt(self, at: datetime, op: str, d: dict[str, Any]) -> None:
        if op in self.by_op:
            self.by_op[op].end = at
            why = str(d.get("why", ""))
            self.gaps[op] = Bar(f"in doubt {op}", "in_doubt", at, op=op, token=self.by_op[op].token, note=why)
            self.bars.append(self.gaps[op])

    def resolution(self, at: datetime, op: str, d: dict[str, Any]) -> None:
        if op in self.gaps and self.gaps[op].end is None:  # a late result settles the gap
            self.gaps[op].end = at
            self.gaps[op].note += f"; resolved: {'executed' if d.get('executed') else 'not executed'}"

    def capture(self, at: datetime, op: str, d: dict[str, Any]) -> None:
        if op in self.by_op:
            self.by_op[op].captured = True

    def approval(self, at: datetime, op: str, d: dict[str, Any]) -> None:
        self.add(Bar(f"approval {d.get('action', '')} {op}", "approval", at, op=op, token=self.token), op)

    def decision(self, at: datetime, op: str, d: dict[str, Any]) -> None:
        if op in self.by_op:
            self.by_op[op].end = _when(d.get("at")) or at
            who = d.get("by") or (d.get("who") or {}).get("principal")
            self.by_op[op].note = f"{d.get('status', '')}" + (f" by {who}" if who else "")

    def timer(self, at: datetime, op: str, d: dict[str, Any]) -> None:
        self.add(
            Bar(f"timer {op}", "wait", at, op=op, token=self.token, note=f"until {d.get('until', '')}"), op
        )

    def child(self, at: datetime, op: str, d: dict[str, Any]) -> None:
        bar = Bar(f"child {d.get('workflow', '')} {op}", "wait", at, op=op, token=self.token)
        bar.note = f"child run {d.get('child', '')}"
        self.children[str(d.get("child"))] = bar
        self.bars.append(bar)

    def child_result(self, at: datetime, op: str, d: dict[str, Any]) -> None:
        bar = self.children.get(str(d.get("child")))
        if bar is not None:
            bar.end, bar.note = at, bar.note + f": {d.get('state', '')}"


KINDS = frozenset(
    "intention redispatch result in_doubt resolution capture".split()
    + "approval decision timer child child_result".split()
)


def read(
    entries: Iterable[Entry], times: Mapping[int, datetime], events: Iterable[Mapping[str, Any]] = ()
) -> tuple[list[Bar], list[Marker]]:
    """The bars and markers of a run, from its journal, the journaled times and its events."""
    r = _Reader()
    for e in entries:
        at = times.get(e.seq)
        if at is not None and e.kind in KINDS:
            getattr(r, e.kind)(at, e.op_id or "", e.data)
    for bar in r.bars:  # a timer's wait ends with the next crossing after it
        if bar.kind == "wait" and bar.label.startswith("timer") and bar.end is None:
            bar.end = next((times[s] for s in sorted(times) if times[s] > bar.start), None)
    _events(events, r.bars, r.markers)
    r.bars.sort(key=lambda b: b.start)
    r.markers.sort(key=lambda m: m.at)
    return r.bars, r.markers


def _events(events: Iterable[Mapping[str, Any]], bars: list[Bar], markers: list[Marker]) -> None:
    """Waits only events tell of (a slot, a rate), and handovers between workers."""
    open_wait: Bar | None = None
    for ev in events:
        at, kind, detail = _when(ev.get("at")), str(ev.get("kind", "")), ev.get("detail") or {}
        if at is None:
            continue
        if open_wait is not None and kind != "waiting":
            open_wait.end, open_wait = at, None
        if kind == "waiting" and str(detail.get("reason", "")) in WAITED:
            reason = str(detail.get("reason"))
            open_wait = Bar(f"wait: {reason}", "wait", at, note=str(detail.get("message", "")))
            bars.append(open_wait)
        elif kind in HANDOVERS:
            markers.append(Marker(at, "handover", f"{kind} {detail.get('message', '') or ''}".strip()))


def _clip(label: str, room: int = 38) -> str:
    """A label that fits the label column (the whole of it is in the bar's title)."""
    return label if len(label) <= room else label[: room - 1] + "\u2026"


def _seconds(a: datetime, b: datetime) -> float:
    return (b - a).total_seconds()


def svg(
    bars: list[Bar], markers: list[Marker], now: datetime, capture_href: Callable[[str], str] | None = None
) -> str:
    """The bars drawn as an SVG document fragment: one lane per bar, labels and titles escaped."""
    if not bars:
        return ""
    first = min([b.start for b in bars] + [m.at for m in markers])
    last = max(
        [b.end or now for b in bars]
        + [m.at for m in markers]
        + [now if any(b.end is None for b in bars) else first]
    )
    span = max(_seconds(first, last), 0.001)
    scale = (WIDTH - LABELS - 10) / span

    def x(at: datetime) -> float:
        return LABELS + _seconds(first, at) * scale

    height = TOP + ROW * len(bars) + 8
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="timeline" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" role="img" aria-label="timeline of the run">',
        f'<text class="axis" x="{LABELS}" y="14">{escape(first.isoformat(timespec="milliseconds"))}</text>',
        f'<text class="axis" x="{WIDTH - 10}" y="14" text-anchor="end">+{span:.3f}s</text>',
    ]
    for i, b in enumerate(bars):
        y = TOP + i * ROW
        x0 = x(b.start)
        x1 = x(b.end) if b.end is not None else WIDTH - 10
        classes = f"bar {b.kind}" + (" failed" if b.failed else "") + (" open" if b.end is None else "")
        took = f"{_seconds(b.start, b.end):.3f}s" if b.end is not None else "open (no outcome yet)"
        title = f"{b.label}: {b.kind}, {took}" + (f", fencing token {b.token}" if b.token is not None else "")
        title += f", {b.note}" if b.note else ""
        label = b.label + (f" [{b.note}]" if b.kind == "approval" and b.note else "")
        out.append(f'<g class="{classes}" data-op="{escape(b.op or "")}"><title>{escape(title)}</title>')
        text = f'<text class="label" x="4" y="{y + 13}">{escape(_clip(label))}</text>'
        if b.captured and b.op and capture_href is not None:
            text = f'<a href="{escape(capture_href(b.op))}">{text}</a>'
        out.append(text)
        out.append(f'<rect x="{x0:.1f}" y="{y + 3}" width="{max(x1 - x0, 2):.1f}" height="{ROW - 6}"/>')
        for r in b.redispatched:
            out.append(
                f'<line class="redispatch" x1="{x(r):.1f}" x2="{x(r):.1f}" y1="{y + 1}" y2="{y + ROW - 1}"/>'
            )
        if b.token is not None:
            out.append(
                f'<text class="token" x="{min(x1 + 3, WIDTH - 40):.1f}" y="{y + 13}">#{b.token}</text>'
            )
        out.append("</g>")
    for m in markers:
        mx = x(m.at)
        out.append(
            f'<g class="marker {escape(m.kind)}"><title>{escape(m.note)}</title>'
            f'<line x1="{mx:.1f}" x2="{mx:.1f}" y1="{TOP - 4}" y2="{height - 4}"/></g>'
        )
    out.append("</svg>")
    return "\n".join(out)
