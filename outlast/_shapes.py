"""``check`` holds a value against a JSON schema, as pydantic writes one for a response type or a
channel's type.

A request's response type is a Python type in the workflow's program; whoever answers (the CLI,
the dashboard, another program) may not have that program. So the request stores the type's JSON
schema (``TypeAdapter(response).json_schema()``) and an answer is checked against it before it is
stored: ``problem`` says what does not fit, or None. It knows the keywords pydantic writes: types,
``properties``/``required``/``additionalProperties``, ``items``/``prefixItems``, ``enum``/``const``,
``anyOf``/``oneOf``/``allOf``, ``$ref`` into ``$defs``, bounds on numbers, texts and lists,
``pattern``, and the formats ``date-time``, ``date``, ``time`` and ``uuid``. A rule a JSON schema
cannot say (a custom validator) is checked only where the type is known: in the workflow.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable
from datetime import date, datetime, time
from typing import Any

_TYPES: dict[str, Callable[[Any], bool]] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "integer": lambda v: (
        (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, float) and v.is_integer())
    ),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
}
_FORMATS: dict[str, Callable[[str], object]] = {
    "date-time": lambda s: datetime.fromisoformat(s.replace("Z", "+00:00")),
    "date": date.fromisoformat,
    "time": time.fromisoformat,
    "uuid": uuid.UUID,
}


def problem(schema: dict[str, Any], value: Any, what: str = "the answer") -> str | None:
    """What in ``value`` (called ``what``) does not fit ``schema`` (a path and why), or None."""
    return _check(schema, value, schema, what)


def _check(s: dict[str, Any] | bool, v: Any, root: dict[str, Any], at: str) -> str | None:
    if s is True or s == {}:
        return None
    if s is False:
        return f"{at} is not allowed"
    p = _combined(s, v, root, at) or _values(s, v, at)
    if p is not None:
        return p
    if isinstance(v, dict):
        return _object(s, v, root, at)
    if isinstance(v, list):
        return _array(s, v, root, at)
    if isinstance(v, str):
        return _text(s, v, at)
    if isinstance(v, int | float) and not isinstance(v, bool):
        return _number(s, v, at)
    return None


def _combined(s: dict[str, Any], v: Any, root: dict[str, Any], at: str) -> str | None:
    """``$ref``, ``allOf``, ``anyOf`` and ``oneOf`` (any one fitting is enough: pydantic's unions)."""
    if "$ref" in s:
        ref = s["$ref"]
        if not ref.startswith("#/"):
            return f"{at}: the schema refers outside itself ({ref})"
        target: Any = root
        for part in ref[2:].split("/"):
            target = target[part]
        if (p := _check(target, v, root, at)) is not None:
            return p
    for sub in s.get("allOf", []):
        if (p := _check(sub, v, root, at)) is not None:
            return p
    for key in ("anyOf", "oneOf"):
        if key in s and all(_check(sub, v, root, at) is not None for sub in s[key]):
            return f"{at} fits none of the allowed shapes"
    return None


def _values(s: dict[str, Any], v: Any, at: str) -> str | None:
    if "const" in s and v != s["const"]:
        return f"{at} must be {s['const']!r}"
    if "enum" in s and v not in s["enum"]:
        return f"{at} must be one of {', '.join(repr(x) for x in s['enum'])}"
    if "type" in s:
        kinds = s["type"] if isinstance(s["type"], list) else [s["type"]]
        if not any(_TYPES[k](v) for k in kinds if k in _TYPES):
            return f"{at} must be {' or '.join(kinds)}, got {_kind(v)}"
    return None


def _object(s: dict[str, Any], v: dict[str, Any], root: dict[str, Any], at: str) -> str | None:
    for name in s.get("required", []):
        if name not in v:
            return f"{at} lacks '{name}'"
    props = s.get("properties", {})
    extra = s.get("additionalProperties", True)
    for name, item in v.items():
        where = f"{at}.{name}"
        sub = props.get(name, extra)
        if sub is False:
            return f"{where} is not a field of its type"
        if (p := _check(sub, item, root, where)) is not None:
            return p
    return None


def _array(s: dict[str, Any], v: list[Any], root: dict[str, Any], at: str) -> str | None:
    if len(v) < s.get("minItems", 0) or len(v) > s.get("maxItems", len(v)):
        return f"{at} must have {s.get('minItems', 0)} to {s.get('maxItems', 'any number of')} items"
    prefix = s.get("prefixItems", [])
    for i, item in enumerate(v):
        sub = prefix[i] if i < len(prefix) else s.get("items", True)
        if (p := _check(sub, item, root, f"{at}[{i}]")) is not None:
            return p
    return None


def _text(s: dict[str, Any], v: str, at: str) -> str | None:
    if len(v) < s.get("minLength", 0) or len(v) > s.get("maxLength", len(v)):
        return f"{at} must be {s.get('minLength', 0)} to {s.get('maxLength', 'any number of')} characters"
    if "pattern" in s and not re.search(s["pattern"], v):
        return f"{at} must match {s['pattern']}"
    fmt = _FORMATS.get(s.get("format", ""))
    if fmt is not None:
        try:
            fmt(v)
        except ValueError:
            return f"{at} is not a {s['format']}"
    return None


def _number(s: dict[str, Any], v: float, at: str) -> str | None:
    bounds: tuple[tuple[str, Callable[[Any], bool], str], ...] = (
        ("minimum", lambda b: v >= b, ">="),
        ("maximum", lambda b: v <= b, "<="),
        ("exclusiveMinimum", lambda b: v > b, ">"),
        ("exclusiveMaximum", lambda b: v < b, "<"),
        ("multipleOf", lambda b: (v / b).is_integer(), "a multiple of"),
    )
    for key, ok, says in bounds:
        if key in s and not ok(s[key]):
            return f"{at} must be {says} {s[key]}"
    return None


def _kind(v: Any) -> str:
    for name in ("null", "boolean", "integer", "number", "string", "array", "object"):
        if _TYPES[name](v):
            return name
    return type(v).__name__


def described(schema: dict[str, Any]) -> str:
    """The response type in a line: its title and, for an object, its fields and their types."""
    props = schema.get("properties")
    title = schema.get("title") or schema.get("type") or "any JSON"
    if not isinstance(props, dict):
        return str(title)
    required = set(schema.get("required", []))

    def kind(p: dict[str, Any]) -> str:
        if "enum" in p or "const" in p:
            return "|".join(json.dumps(v) for v in p.get("enum", [p.get("const")]))
        return str(p.get("type") or p.get("$ref", "any").rsplit("/", 1)[-1])

    shown = ", ".join(f"{k}{'' if k in required else '?'}: {kind(v)}" for k, v in props.items())
    return f"{title} {{{shown}}}"
