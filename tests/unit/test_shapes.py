"""An answer checked against the JSON schema pydantic writes for a response type (outlast/_shapes.py):
what pydantic dumps from a valid value fits; what breaks a rule the schema says is named, with its
path. No server."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any, Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from outlast._shapes import described, problem


class Line(BaseModel):
    sku: str = Field(pattern=r"^[A-Z]{3}-\d+$")
    qty: int = Field(ge=1, le=99)


class Order(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: uuid.UUID
    at: datetime
    lines: list[Line] = Field(min_length=1)
    note: str | None = None
    kind: Literal["retail", "trade"] = "retail"
    pair: tuple[int, str] = (0, "")
    tags: dict[str, int] = {}


def schema(t: Any) -> dict[str, Any]:
    return TypeAdapter(t).json_schema()


GOOD = Order(
    id=uuid.uuid4(),
    at=datetime(2026, 12, 4, tzinfo=UTC),
    lines=[Line(sku="ABC-1", qty=2)],
    note=None,
    kind="trade",
    pair=(1, "x"),
    tags={"a": 1},
)


def test_what_pydantic_dumps_from_a_valid_value_fits() -> None:
    s = schema(Order)
    assert problem(s, GOOD.model_dump(mode="json")) is None
    for t, v in [(int, 3), (int, 3.0), (float, 2), (list[str], ["a"]), (bool, True), (str | None, None)]:
        assert problem(schema(t), v) is None, (t, v)


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"kind": "wholesale"}, "the answer.kind must be one of 'retail', 'trade'"),
        ({"extra": 1}, "the answer.extra is not a field of its type"),
        ({"lines": []}, "the answer.lines must have 1 to any number of items"),
        ({"lines": [{"sku": "abc", "qty": 1}]}, "the answer.lines[0].sku must match"),
        ({"lines": [{"sku": "ABC-1", "qty": 100}]}, "the answer.lines[0].qty must be <= 99"),
        ({"lines": [{"sku": "ABC-1"}]}, "the answer.lines[0] lacks 'qty'"),
        ({"at": "yesterday"}, "the answer.at is not a date-time"),
        ({"id": "not-a-uuid"}, "the answer.id is not a uuid"),
        ({"note": 5}, "the answer.note fits none of the allowed shapes"),
        ({"pair": ["x", "y"]}, "the answer.pair[0] must be integer, got string"),
        ({"tags": {"a": "one"}}, "the answer.tags.a must be integer, got string"),
    ],
)
def test_a_broken_rule_is_named_with_its_path(change: dict[str, Any], said: str) -> None:
    value = {**GOOD.model_dump(mode="json"), **change}
    found = problem(schema(Order), value)
    assert found is not None and found.startswith(said), found
    with pytest.raises(ValueError):  # pydantic agrees: the value is not an Order
        Order.model_validate(value)


def test_scalars_and_booleans_are_told_apart() -> None:
    assert problem(schema(int), True) == "the answer must be integer, got boolean"
    assert problem(schema(int), 2.5) == "the answer must be integer, got number"
    assert problem(schema(str), None) == "the answer must be string, got null"
    assert problem(schema(Order), [1]) == "the answer must be object, got array"


def test_the_response_type_in_a_line() -> None:
    assert described(schema(Line)) == "Line {sku: string, qty: integer}"
    assert described(schema(int)) == "integer"
    assert 'kind?: "retail"|"trade"' in described(schema(Order))
