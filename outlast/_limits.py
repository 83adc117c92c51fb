"""This module holds the declared flow limits of tools and workflows: rates such as ``"500/min"``,
parsed once at registration (a mistake is refused there, naming the tool)."""

from __future__ import annotations

import re
from dataclasses import dataclass

_UNITS = {"s": 1.0, "sec": 1.0, "second": 1.0, "m": 60.0, "min": 60.0, "minute": 60.0}
_UNITS |= {"h": 3600.0, "hour": 3600.0, "d": 86400.0, "day": 86400.0}
_RATE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*/\s*(\d+(?:\.\d+)?)?\s*([a-z]+)\s*")


@dataclass(frozen=True)
class Rate:
    """A ``Rate`` allows at most ``limit`` of ``name`` (``"requests"``: one per dispatch; any other
    name: what the tool charges, reserved from its ``cost`` estimate) in any ``window`` seconds."""

    name: str
    limit: float
    window: float


def parse_rates(tool: str, rates: dict[str, str], cost: dict[str, float]) -> tuple[Rate, ...]:
    """``{"requests": "500/min", "tokens": "90000/min"}`` as rates; a name other than
    ``requests`` needs an estimate in ``cost``, reserved before each dispatch."""
    out = []
    for name, text in rates.items():
        m = _RATE.fullmatch(text.lower()) if isinstance(text, str) else None
        if m is None or m[3] not in _UNITS or float(m[1]) <= 0 or (m[2] and float(m[2]) <= 0):
            raise ValueError(
                f"tool {tool!r}: rate {name}={text!r} is not COUNT/UNIT (e.g. '500/min', '10/5s'; "
                "units s, min, h, day)"
            )
        if name != "requests" and name not in cost:
            raise ValueError(
                f"tool {tool!r}: rate {name!r} needs an estimate to reserve before each dispatch: "
                f"cost={{{name!r}: ...}} (the tool reports the actual with charge())"
            )
        rate = Rate(name, float(m[1]), float(m[2] or 1) * _UNITS[m[3]])
        if cost.get(name, 1.0) > rate.limit:
            raise ValueError(
                f"tool {tool!r}: one dispatch reserves {cost[name]:g} {name}, more than rate "
                f"{text!r} allows in a whole window; lower its cost estimate or raise the rate"
            )
        out.append(rate)
    return tuple(out)
