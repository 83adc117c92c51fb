"""A ``Wait`` is what a durable wait's call returns.

The calls are ``run.sleep``, ``run.sleep_until``, ``run.approval``, ``run.request``,
``run.receive`` and ``child.result()``; a ``Wait`` is awaited alone or given to ``run.first``, which returns a
``Won`` (``first.py``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from typing import Any, Generic, NamedTuple, TypeVar

T = TypeVar("T")


class Wait(Generic[T]):
    """A durable wait, made but not begun: ``await`` it for the wait alone, or give it to
    ``run.first``. Its position in the run was fixed when it was made."""

    __slots__ = ("_alone", "kind", "op_id", "spec")

    def __init__(
        self, kind: str, op_id: str, spec: dict[str, Any], alone: Callable[[], Awaitable[T]]
    ) -> None:
        self.kind = kind  # timer, approval, request, message, child
        self.op_id = op_id
        self.spec = spec
        self._alone = alone

    def __await__(self) -> Generator[Any, None, T]:
        return self._alone().__await__()

    def __repr__(self) -> str:
        return f"Wait({self.kind}, {self.op_id})"


class Won(NamedTuple):
    """What ``run.first`` returns: which wait won (its position among those given), and its
    value (``None`` for a timer)."""

    which: int
    value: Any
