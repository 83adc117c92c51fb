"""The chain: canonical JSON, hashing, and where verification says a journal was altered."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from outlast._journal import (
    Entry,
    Unstorable,
    args_hash,
    canonical,
    first_bad_crossing,
    jsonable,
    make_entry,
)


def chain_of(n: int) -> list[Entry]:
    out: list[Entry] = []
    head = ""
    for i in range(1, n + 1):
        e = make_entry(head, i, "value", f"op-{i}", {"name": "now", "value": i})
        out.append(e)
        head = e.hash
    return out


def test_canonical_is_order_independent_and_compact() -> None:
    assert canonical({"b": 1, "a": [1, "é"]}) == '{"a":[1,"é"],"b":1}'
    assert args_hash({"x": 1, "y": 2}) == args_hash({"y": 2, "x": 1})
    with pytest.raises(ValueError):
        canonical({"x": float("nan")})


# Storable text: no NUL, no lone surrogate (both refused, as their own tests show).
TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"))
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(JSON)
def test_canonical_text_is_the_standard_encoders_text(value: Any) -> None:
    # Every hash already journaled rests on this text: the encoder called directly must give
    # exactly what json.dumps with the same options gives.
    standard = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert canonical(value) == standard


@settings(max_examples=300, deadline=None)
@given(
    JSON
    | st.tuples(JSON, JSON)
    | st.sampled_from([float("nan"), "a\x00b", "\ud800", 2**63, -(2**63), 10**70, 10**5000])
)
def test_jsonable_is_the_value_stored_and_read_back(value: Any) -> None:
    # The engine's shortcut for what it stores: the same value, or the same refusal, as a round
    # trip through the canonical text (a tuple comes back a list; NaN, NUL, a surrogate are refused).
    try:
        expected = json.loads(canonical(value, 64))
    except Unstorable as exc:
        with pytest.raises(Unstorable, match=re.escape(str(exc))):
            jsonable(value, 64)
        return
    got = jsonable(value, 64)
    assert got == expected and type(got) is type(expected)
    assert canonical(got) == canonical(expected)


def test_an_intact_chain_verifies() -> None:
    entries = chain_of(5)
    assert first_bad_crossing(entries, entries[-1].hash) is None
    assert first_bad_crossing([], "") is None


@pytest.mark.parametrize("n", [1, 3, 5])
def test_one_changed_byte_names_its_crossing(n: int) -> None:
    entries = chain_of(5)
    e = entries[n - 1]
    entries[n - 1] = Entry(e.seq, e.kind, e.op_id, e.body.replace(f'"value":{n}', f'"value":{n + 1}'), e.hash)
    assert first_bad_crossing(entries, entries[-1].hash) == n


def test_a_recomputed_entry_breaks_the_next_link() -> None:
    entries = chain_of(4)
    forged = make_entry(entries[0].hash, 2, "value", "op-2", {"name": "now", "value": 99})
    entries[1] = forged
    assert first_bad_crossing(entries, entries[-1].hash) == 3


def test_a_truncated_journal_does_not_match_the_recorded_head() -> None:
    entries = chain_of(4)
    assert first_bad_crossing(entries[:3], entries[-1].hash) == 4


def test_columns_must_agree_with_the_body() -> None:
    entries = chain_of(2)
    e = entries[1]
    entries[1] = Entry(e.seq, "intention", e.op_id, e.body, e.hash)
    assert first_bad_crossing(entries, entries[-1].hash) == 2


def test_an_entry_parses_its_body_once_for_the_engine_and_hands_out_copies() -> None:
    """``fields`` (the engine's reads: the chain's check, a crossing's tool and hash) is parsed
    once and kept; ``data`` is a fresh copy each time, so workflow code that changes what it was
    given never changes the journal a compensation or a status reads next."""
    e = make_entry("", 1, "result", "op-1", {"ok": {"items": [1, 2]}})
    assert e.fields is e.fields
    given = e.data
    given["ok"]["items"].append(3)
    assert e.data["ok"] == {"items": [1, 2]} == e.fields["ok"]
    assert e.data is not e.data
