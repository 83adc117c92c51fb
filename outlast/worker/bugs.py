"""This module tells a bug from a failure. An exception a workflow's code raises that it did not
declare (``outlast.Failure``, an outlast refusal, or a type listed in ``fails_on``) is a bug: the run
is parked (``waiting``, reason ``workflow_error``), holding no worker, until a fix is deployed and
the run resumed (``outlast resume RUN``), its journal replayed: no effect redone, no new key. A
declared failure ends the run ``failed``."""

from __future__ import annotations

import traceback
from typing import Any

from outlast._journal import storable
from outlast.app import Workflow
from outlast.errors import OutlastError

REASON = "workflow_error"


def is_bug(wf: Workflow, exc: BaseException) -> bool:
    """Whether ``exc``, raised out of ``wf``, is a bug (parks the run) rather than a failure it means."""
    return not isinstance(exc, (OutlastError, *wf.fails_on))


def error_of(exc: BaseException) -> dict[str, Any]:
    """The exception as a run stores it: its type, message and traceback."""
    return {
        "type": type(exc).__name__,
        "message": storable(str(exc)),
        "traceback": storable("".join(traceback.format_exception(exc))),
    }


def parked(run_id: str, exc: BaseException, crossings: int) -> str:
    """The parked run's message: the exception, where it was raised, and the way out."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" at {frames[-1].filename}:{frames[-1].lineno} in {frames[-1].name}" if frames else ""
    return (
        f"run '{run_id}': the workflow raised {type(exc).__name__}: {exc}{where}, after {crossings} "
        f"journaled crossings; the run is parked, nothing failed: fix the code, deploy it, then "
        f"outlast resume {run_id} (its journal is replayed: no effect redone). To end it instead: "
        f"outlast cancel {run_id}"
    )
