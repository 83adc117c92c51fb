"""Captures by delta without a server: the entry's data, rebuilt whole by ``requests``, is the
request captured, hashed as a whole; a journal read without capture bodies keeps its chain."""

from __future__ import annotations

import json
from typing import Any

from outlast import App
from outlast._captured import Message, requests
from outlast._journal import Unread, canonical, digest, first_bad_crossing, make_entry
from outlast._secrets import Secrets
from outlast.worker.captures import Captures
from outlast.worker.journaled import Journaled


class NoStore:
    async def captures(self, run_id: str, upto: int) -> list[Any]:
        raise AssertionError("nothing to learn")


def journal(datas: list[dict[str, Any]]) -> list[Any]:
    entries, head = [], ""
    for i, d in enumerate(datas, start=1):
        e = make_entry(head, i, "capture", f"op-{i}", d)
        entries.append(e)
        head = e.hash
    return entries


def test_each_capture_rebuilt_whole_is_the_request_and_has_its_hash() -> None:
    caps = Captures(NoStore(), "r", Secrets(App(), None), 0)
    said = [Message({"kind": "request", "n": i, "text": "é" * i}) for i in range(6)]
    asked = [
        {"a": 1, "messages": said[:2], "z": {"t": True}},  # keys before and after the messages
        {"a": 1, "messages": said[:4], "z": {"t": True}},  # an extension
        {"a": 1, "messages": [said[0], *said[3:5]], "z": {"t": True}},  # trimmed
        {"messages": [dict(m) for m in said]},  # plain dicts, another framing
        {"url": "x", "body": "no messages"},  # stored whole
    ]
    datas = [caps.stored("m", {}, r) for r in asked]
    assert datas[1]["messages"] == [[0, 2], *(digest(canonical(m)) for m in said[2:4])]
    assert datas[2]["messages"] == [[0, 1], [3, 4], digest(canonical(said[4]))]
    assert sum(len(d.get("new", {})) for d in datas) == 6  # each message stored once
    whole = requests(journal(datas))
    for i, r in enumerate(asked, start=1):
        text = canonical(r)
        assert whole[i]["request"] == canonical_value(r)
        assert whole[i]["request_hash"] == digest(text) and whole[i]["bytes"] == len(text.encode())


def test_a_capture_whose_base_is_not_in_the_journal_says_so_instead_of_a_shorter_request() -> None:
    caps = Captures(NoStore(), "r", Secrets(App(), None), 0)
    said = [Message({"n": i}) for i in range(3)]
    datas = [caps.stored("m", {}, {"messages": said[:n]}) for n in (2, 3)]
    shown = requests(journal(datas[1:]))[1]
    assert "request" not in shown and "is not in the journal" in shown["withheld"]


def canonical_value(r: dict[str, Any]) -> Any:
    return json.loads(canonical(r))


def test_a_journal_with_capture_bodies_unread_verifies_and_a_changed_entry_after_one_does_not() -> None:
    entries = journal([{"tool": "m", "request": {"x": i}} for i in range(3)])
    unread = [Unread(e.seq, e.kind, e.op_id, "", e.hash) if e.seq == 2 else e for e in entries]
    assert first_bad_crossing(unread, entries[-1].hash) is None
    changed = make_entry(entries[1].hash, 3, "capture", "op-3", {"tool": "m", "request": {"x": 9}})
    assert first_bad_crossing([*unread[:2], changed], entries[-1].hash) == 4  # the head moved on
    wrong = Unread(2, "capture", "op-2", "", "0" * 64)  # a stored hash changed: the next link fails
    assert first_bad_crossing([unread[0], wrong, entries[2]]) == 3


def test_a_long_string_an_earlier_entry_holds_is_stored_as_where_it_is_and_rebuilt_checked() -> None:
    caps = Captures(NoStore(), "r", Secrets(App(), None), 0)
    page = "page 1: " + "words and 123456 numbers " * 200  # 5 KB: a tool's result
    result = make_entry(
        "", 1, "result", "op-1", {"kind": "result", "ok": {"kind": "tool_return", "result": page}}
    )
    small = make_entry(result.hash, 2, "result", "op-2", {"kind": "result", "ok": "short"})
    journaled = Journaled([result, small])
    assert journaled.long == [result]  # only an entry long enough to hold a long string is looked at
    said = [
        Message({"kind": "request", "parts": [{"content": "read it"}]}),
        Message({"kind": "response", "parts": [{"tool_name": "read_page"}]}),
        Message({"kind": "request", "parts": [{"content": page, "part_kind": "tool-return"}]}),
    ]
    asked = {"messages": said, "settings": {"t": 1}}
    d = caps.stored("m", {}, asked, journaled)
    assert d["texts"] == {digest(canonical(said[2])): [[["parts", 0, "content"], 1, ["ok", "result"]]]}
    capture = make_entry(small.hash, 3, "capture", "op-3", d)
    assert page not in capture.body and len(capture.body) < 1000  # the page is stored once: in the result
    whole = requests([result, small, capture])[3]
    text = canonical(asked)
    assert whole["request"] == canonical_value(asked) and "texts" not in whole
    assert whole["request_hash"] == digest(text) and whole["bytes"] == len(text.encode())
    assert first_bad_crossing([result, small, capture], capture.hash) is None  # the chain covers both

    # the result changed (or not in the journal read): the message is not shown, rather than another
    changed = make_entry(
        "", 1, "result", "op-1", {"kind": "result", "ok": {"kind": "tool_return", "result": page + "!"}}
    )
    for journal_read in ([changed, small, capture], [small, capture]):
        shown = requests(journal_read)[3]
        assert "request" not in shown and "1 message(s) missing" in shown["withheld"]


def test_a_capture_of_small_messages_holds_no_texts_and_looks_at_no_entry() -> None:
    caps = Captures(NoStore(), "r", Secrets(App(), None), 0)
    journaled = Journaled([])
    journaled.long = None  # type: ignore[assignment]  # a look would fail
    d = caps.stored(
        "m", {}, {"messages": [Message({"n": i, "text": "x" * 900}) for i in range(3)]}, journaled
    )
    assert "texts" not in d and len(d["new"]) == 3
