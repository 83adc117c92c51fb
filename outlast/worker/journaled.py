"""This module gives a run's journal as the replayer reads it: indexed by operation once, and the
words that name a journaled crossing in a refusal (``describe``)."""

from __future__ import annotations

from typing import Any

from outlast._captured import LONG
from outlast._journal import Entry, canonical, operation_state
from outlast._payloads import referenced


class Journaled:
    """``Journaled`` holds the journal of one run, indexed by operation, with the chain head to
    append after."""

    def __init__(self, entries: list[Entry]) -> None:
        self.entries = entries
        self.head = entries[-1].hash if entries else ""
        self.length = len(entries)
        self.ops: dict[str, dict[str, Entry]] = {}  # the latest entry of each kind
        self.history: dict[str, list[Entry]] = {}  # every entry, in order
        self.long: list[Entry] = []  # entries whose body may hold a long string (``outlast._captured.LONG``)
        for e in entries:
            self.add(e)

    def add(self, e: Entry) -> None:
        if e.op_id is not None:
            self.ops.setdefault(e.op_id, {})[e.kind] = e
            self.history.setdefault(e.op_id, []).append(e)
        if len(e.body) >= LONG and e.kind != "capture" and not referenced(e.body):
            self.long.append(e)  # a capture's message may refer to its strings

    def log_resumed(self, log: Any) -> None:
        """Log a resume: the journal's length, and each intention a crash left without outcome."""
        if not self.entries:
            return
        log.info("run.resumed", entries=self.length)
        for op, intent in self.pending():
            tool, key = intent["tool"], intent["key"]
            log.info("operation.unresolved", operation_id=op, tool=tool, idempotency_key=key)

    def pending(self) -> list[tuple[str, dict[str, Any]]]:
        """Operations with an intention and no outcome: the gaps a crash left."""
        return [
            (op, kinds["intention"].data)
            for op, kinds in self.ops.items()
            if "intention" in kinds and operation_state(self.history[op])[0] == "pending"
        ]


def asked_by_result(kinds: dict[str, Entry]) -> Entry | None:
    """A read's result, which is its own intention (tool, arguments, hash, start): None if the
    operation has none, or its result is an ordinary one (an intention says what was asked)."""
    result = kinds.get("result") or kinds.get("abandoned")  # or its abandonment, as the result's
    return result if result is not None and "tool" in result.fields else None


def describe(tool: str, args: dict[str, Any]) -> str:
    return f"{tool}({canonical(args)})"


def describe_entry(e: Entry) -> str:
    d = e.data
    # a read's result, or its abandonment, says what it asked (it has no intention)
    if e.kind in ("intention", "refused") or (e.kind in ("result", "abandoned") and "tool" in d):
        return describe(d["tool"], d["args"])
    if e.kind == "approval":
        return f"approval of {describe(d['action'], d['args'])}"
    if e.kind == "timer":
        return "sleep()"
    if e.kind == "patch":
        return f"patched({d['name']!r})"
    if e.kind == "child":
        return f"start of child run {d['child']} ({d['workflow']})"
    if e.kind == "state":
        return f"set_state({d['key']!r})"
    if e.kind == "event":
        return f"emit({d['event']!r})"
    if e.kind == "child_result":
        return f"result of child run {d['child']}"
    if e.kind in ("request", "response"):
        return f"request {d['name']}" if e.kind == "request" else "the answer to a request"
    return f"{d.get('name', e.kind)}()"
