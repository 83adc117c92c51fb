"""This module holds the rules of a workflow's declared channels. Declared with ``@app.workflow(...,
channels={"reply": Reply})``, each gives the type a message on it must have. A pydantic model or any
type a pydantic ``TypeAdapter`` validates. A sender's payload is validated, then stored as JSON; the
workflow's ``receive`` gets it validated again, as that type.

A sender without the program checks the payload against the type's JSON schema, which every worker
publishes (``schemas``, ``outlast_declared`` of migration 0028) and ``_shapes`` checks."""

from __future__ import annotations

import functools
from typing import Any

from pydantic import TypeAdapter, ValidationError
from pydantic.errors import PydanticInvalidForJsonSchema

from outlast import _shapes
from outlast.errors import InvalidInput


@functools.lru_cache(maxsize=256)
def _adapter(kind: Any) -> TypeAdapter[Any]:
    return TypeAdapter(kind)


def adapter(kind: Any) -> TypeAdapter[Any]:
    try:
        return _adapter(kind)
    except TypeError:  # an unhashable type: not cached
        return TypeAdapter(kind)


def check_channel(types: dict[str, Any] | None, where: str, channel: str) -> None:
    """A workflow that declares channels is sent only on those."""
    if types is not None and channel not in types:
        known = ", ".join(sorted(types)) or "none"
        raise InvalidInput(f"{where}: unknown channel (its workflow declares: {known}); nothing stored")


def to_json(types: dict[str, Any] | None, where: str, channel: str, payload: Any) -> Any:
    """The payload to store: validated against the channel's type (if declared) and dumped as
    JSON; else as given. ``InvalidInput`` naming the run and the channel if it does not fit."""
    check_channel(types, where, channel)
    if types is None:
        return payload
    kind = adapter(types[channel])
    try:
        return kind.dump_python(kind.validate_python(payload), mode="json")
    except ValidationError as exc:
        first = exc.errors()[0]
        at = ".".join(str(p) for p in first.get("loc", ())) or "the payload"
        kind_name = _name(types[channel])
        raise InvalidInput(
            f"{where}: the payload is not a valid {kind_name} ({at}: {first['msg']}); nothing stored"
        ) from None


def schemas(types: dict[str, Any] | None) -> dict[str, Any] | None:
    """Each channel's JSON schema, as workers publish them (None: the workflow declares none). A
    type pydantic cannot write a schema for gets ``{}``: any payload, validated at the take."""
    if types is None:
        return None
    out: dict[str, Any] = {}
    for channel, kind in types.items():
        try:
            out[channel] = adapter(kind).json_schema()
        except PydanticInvalidForJsonSchema:
            out[channel] = {}
    return out


def check_schema(schema: dict[str, Any] | None, where: str, payload: Any) -> None:
    """``InvalidInput`` naming the run and the channel if ``payload`` does not fit the channel's
    published JSON schema (None: no schema, nothing to check)."""
    if schema is None:
        return
    wrong = _shapes.problem(schema, payload, "the payload")
    if wrong is not None:
        kind = schema.get("title") or schema.get("type") or "value"
        raise InvalidInput(f"{where}: the payload is not a valid {kind} ({wrong}); nothing stored")


def from_json(types: dict[str, Any] | None, where: str, channel: str, payload: Any) -> Any:
    """A taken message's payload as the workflow receives it (its channel's type, if declared)."""
    if types is None or channel not in types:
        return payload
    try:
        return adapter(types[channel]).validate_python(payload)
    except ValidationError as exc:
        raise InvalidInput(
            f"{where}: a message taken is not a valid {_name(types[channel])} ({exc.errors()[0]['msg']})"
        ) from None


def unfit(types: dict[str, Any] | None, channel: str, payload: Any) -> str | None:
    """Why a stored payload cannot be taken as its channel's declared type (None: it can). A
    payload stored unchecked (``outlast_send`` checks only the channel) is set aside for this."""
    if types is None or channel not in types:
        return None
    try:
        adapter(types[channel]).validate_python(payload)
    except ValidationError as exc:
        first = exc.errors()[0]
        at = ".".join(str(p) for p in first.get("loc", ())) or "the payload"
        return f"not a valid {_name(types[channel])} ({at}: {first['msg']})"[:500]
    return None


def _name(kind: Any) -> str:
    return str(getattr(kind, "__name__", kind))
