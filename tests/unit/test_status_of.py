"""Every outlast error has its own HTTP status in the dashboard: a refusal is said as what it is
(400, 403, 404, 409...), never as a server out of reach (503) unless one is."""

from __future__ import annotations

import importlib
import pkgutil

import outlast
from outlast import errors
from outlast.dashboard.web import STATUS, status_of
from outlast.errors import OutlastError


def every_error() -> set[type[OutlastError]]:
    """Every subclass of OutlastError that a module of outlast defines (each module imported)."""
    for mod in pkgutil.walk_packages(outlast.__path__, "outlast."):
        if mod.name.endswith("__main__"):  # the command line itself: it would run
            continue
        try:
            importlib.import_module(mod.name)
        except ImportError as exc:  # an optional extra not installed here
            assert exc.name is not None and not exc.name.startswith("outlast"), exc
    found: set[type[OutlastError]] = set()
    todo = [OutlastError]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub.__module__.startswith("outlast.") and sub not in found:
                found.add(sub)
                todo.append(sub)
    return found


def test_every_error_class_has_a_status_below_the_root() -> None:
    """A new error class says its status in ``STATUS`` (or inherits a named class's): the root
    is never what decides it."""
    found = every_error()
    assert len(found) > 30  # the walk found the errors
    unnamed = sorted(
        c.__qualname__ for c in found if not any(k in STATUS for k in c.__mro__ if k is not OutlastError)
    )
    assert unnamed == [], f"name their HTTP status in outlast/dashboard/web.py STATUS: {unnamed}"
    assert set(STATUS) <= found  # nothing stale in the table


def test_refusals_say_what_they_are() -> None:
    """The statuses people meet, each by its class."""
    said = {
        errors.InvalidInput("x"): 400,
        errors.UnknownRun("r"): 404,
        errors.UnknownSchedule("s"): 404,
        errors.UnknownApproval("r", "a"): 404,
        errors.DecisionForbidden("bob may not decide"): 403,
        errors.DecisionRefused("the request expired"): 409,
        errors.RunFinished("r is succeeded"): 409,
        errors.RunNotFinished("r goes on"): 409,
        errors.RunChanged("r changed"): 409,
        errors.RunNotWaiting("r is running"): 409,
        errors.NotInDoubt("op-1"): 409,
        errors.ProgramChanged("r"): 409,
        errors.ServiceUnavailable("postgres down"): 503,
        errors.WaitTimeout("r goes on"): 504,
        errors.ConfigError("no users file"): 500,
        OutlastError("nobody named it"): 500,
    }
    assert {type(k).__name__: status_of(k) for k in said} == {type(k).__name__: v for k, v in said.items()}
    assert all(
        status_of(k) != 503 for k in said if not isinstance(k, errors.ServiceUnavailable | errors.SchemaError)
    )
