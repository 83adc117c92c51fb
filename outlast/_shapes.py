"""``check`` holds a value against a JSON schema, as pydantic writes one for a response type or a
channel's type.

A request's response type is a Python type in the workflow's program; whoever answers (the CLI,
the dashboard, another program) may not have that program. So the request stores the type's JSON
schema (``TypeAdapter(response).json_schema()``) and an answer is checked against it before it is
stored: ``problem`` says what does not fit, or None. It knows the keywords pydantic writes: types,
``properties``/``required``/``additionalProperties``, ``items``/``prefixItems``, ``enum``/``const``,
``anyOf``/``oneOf``/``allOf``, ``$ref`` into ``$defs``, bounds on numbers, texts and lists,
sizes of objects (``minProperties``/``maxProperties``, ``propertyNames``), ``pattern``, and the
formats ``date-time``, ``date``, ``time``, ``duration`` and ``uuid``. It accepts no more than pydantic
validates at the take (``tests/unit/test_shapes_agree.py`` holds it to that): a text's pattern and
format are checked by pydantic's own validators (pydantic's regular expressions, its date and time
parser: no ISO week dates, no compact forms), and an integer written as a float only within
pydantic's 64-bit range. A rule a JSON schema cannot say (a custom validator) is checked only where
the type is known: in the workflow.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

from pydantic_core import CoreConfig, SchemaError, SchemaValidator, ValidationError, core_schema

_INT64 = 2**63

_TYPES: dict[str, Callable[[Any], bool]] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "integer": lambda v: (
        (isinstance(v, int) and not isinstance(v, bool))
        or (isinstance(v, float) and v.is_integer() and -_INT64 <= v < _INT64)
    ),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
}
_FORMATS: dict[str, Callable[[], core_schema.CoreSchema]] = {
    "date-time": core_schema.datetime_schema,
    "date": core_schema.date_schema,
    "time": core_schema.time_schema,
    "duration": core_schema.timedelta_schema,
    "uuid": core_schema.uuid_schema,
}


@functools.lru_cache(maxsize=256)
def _validator(fmt: str | None, pattern: str | None) -> SchemaValidator:
    """pydantic's own check of a text's format (one it writes) and pattern, as the take runs it: a
    pattern in pydantic's default regular expressions, else (look-arounds) in Python's, which a type
    must then have asked for (``regex_engine="python-re"``)."""
    if fmt is not None:
        return SchemaValidator(_FORMATS[fmt]())
    try:
        return SchemaValidator(core_schema.str_schema(pattern=pattern))
    except SchemaError:
        return SchemaValidator(core_schema.str_schema(pattern=pattern), CoreConfig(regex_engine="python-re"))


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
    low, high = s.get("minProperties", 0), s.get("maxProperties")
    if len(v) < low or (high is not None and len(v) > high):
        return f"{at} must have {low} to {'any number of' if high is None else high} fields"
    for name in s.get("required", []):
        if name not in v:
            return f"{at} lacks '{name}'"
    props = s.get("properties", {})
    extra = s.get("additionalProperties", True)
    for name, item in v.items():
        where = f"{at}.{name}"
        sub = props.get(name, extra)
        if "propertyNames" in s and (p := _check(s["propertyNames"], name, root, f"{at} key {name!r}")):
            return p
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
    if "pattern" in s and not _fits(None, s["pattern"], v):
        return f"{at} must match {s['pattern']}"
    if s.get("format") in _FORMATS and not _fits(s["format"], None, v):
        return f"{at} is not a {s['format']}"
    return None


def _fits(fmt: str | None, pattern: str | None, v: str) -> bool:
    try:
        _validator(fmt, pattern).validate_python(v)
    except (ValidationError, SchemaError):  # a pattern no engine reads: nothing fits it
        return False
    return True


_BOUNDS = {  # a number's bounds: the keyword, pydantic's name for it, and how a refusal says it
    "minimum": ("ge", ">="),
    "maximum": ("le", "<="),
    "exclusiveMinimum": ("gt", ">"),
    "exclusiveMaximum": ("lt", "<"),
    "multipleOf": ("multiple_of", "a multiple of"),
}
_SAID = {"greater_than_equal": "minimum", "less_than_equal": "maximum", "greater_than": "exclusiveMinimum"}
_SAID |= {"less_than": "exclusiveMaximum", "multiple_of": "multipleOf"}


@functools.lru_cache(maxsize=256)
def _numeric(integer: bool, bounds: tuple[tuple[str, Any], ...]) -> SchemaValidator:
    """pydantic's own check of a number's bounds (its rounding of ``multipleOf`` included)."""
    named = {_BOUNDS[k][0]: b for k, b in bounds}
    try:
        made = core_schema.int_schema(**named) if integer else core_schema.float_schema(**named)
        return SchemaValidator(made)
    except SchemaError:  # an integer's bound that is no integer: no type pydantic builds writes one
        return SchemaValidator(core_schema.float_schema(**named))


def _number(s: dict[str, Any], v: float, at: str) -> str | None:
    bounds = tuple((k, s[k]) for k in _BOUNDS if k in s)
    if not bounds:
        return None
    try:
        _numeric(s.get("type") == "integer", bounds).validate_python(v)
    except ValidationError as exc:
        key = _SAID.get(exc.errors()[0]["type"])
        if key is None:
            return f"{at} is not a valid {s.get('type', 'number')}"
        return f"{at} must be {_BOUNDS[key][1]} {s[key]}"
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
