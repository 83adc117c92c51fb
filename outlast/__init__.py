"""outlast: long, tool-using runs that outlast the worker that started them.

This module is the public door: what it exports, with ``outlast.fence``, ``outlast.settings``,
``outlast.identity``, ``outlast.testing`` and ``outlast.dashboard``, is the API. Every other
module is internal and may change in any release.
"""

from typing import TYPE_CHECKING, Any

from outlast.action import NOT_EXECUTED, Action, current_action
from outlast.app import App, Retry
from outlast.errors import (
    AnswerForbidden,
    AnswerRefused,
    ApprovalExpired,
    ApprovalRejected,
    BudgetExhausted,
    Cancelled,
    ChildFailed,
    ConfigError,
    DeadlineExceeded,
    DecisionForbidden,
    DecisionRefused,
    Fenced,
    InDoubt,
    InvalidInput,
    JournalAltered,
    NotInDoubt,
    OutlastError,
    PartialRefused,
    PolicyRefused,
    ProgramChanged,
    RateLimited,
    RequestExpired,
    ResumeImpossible,
    ResumeRefused,
    RunChanged,
    RunConflict,
    RunFinished,
    RunNotFinished,
    RunNotWaiting,
    SchemaError,
    ServiceUnavailable,
    ToolError,
    ToolTimeout,
    UnknownApproval,
    UnknownRun,
    UnknownTool,
    UnknownWorkflow,
    WaitTimeout,
)
from outlast.fence import fence
from outlast.model import Answered, Decision, Partial, RunRecord, RunState
from outlast.settings import Settings
from outlast.worker.children import Child
from outlast.worker.run import Run
from outlast.worker.wait import Won

if TYPE_CHECKING:
    from outlast.producer import AsyncClient, Client


def __getattr__(name: str) -> Any:
    """``Client`` and ``AsyncClient`` are imported on first use: a worker never needs the
    producer's modules (~1.5 MB of its memory)."""
    if name in ("AsyncClient", "Client"):
        from outlast import producer

        return getattr(producer, name)
    raise AttributeError(f"module 'outlast' has no attribute {name!r}")


__all__ = [
    "NOT_EXECUTED",
    "Action",
    "AnswerForbidden",
    "AnswerRefused",
    "Answered",
    "App",
    "ApprovalExpired",
    "ApprovalRejected",
    "AsyncClient",
    "BudgetExhausted",
    "Cancelled",
    "Child",
    "ChildFailed",
    "Client",
    "ConfigError",
    "DeadlineExceeded",
    "Decision",
    "DecisionForbidden",
    "DecisionRefused",
    "Fenced",
    "InDoubt",
    "InvalidInput",
    "JournalAltered",
    "NotInDoubt",
    "OutlastError",
    "Partial",
    "PartialRefused",
    "PolicyRefused",
    "ProgramChanged",
    "RateLimited",
    "RequestExpired",
    "ResumeImpossible",
    "ResumeRefused",
    "Retry",
    "Run",
    "RunChanged",
    "RunConflict",
    "RunFinished",
    "RunNotFinished",
    "RunNotWaiting",
    "RunRecord",
    "RunState",
    "SchemaError",
    "ServiceUnavailable",
    "Settings",
    "ToolError",
    "ToolTimeout",
    "UnknownApproval",
    "UnknownRun",
    "UnknownTool",
    "UnknownWorkflow",
    "WaitTimeout",
    "Won",
    "current_action",
    "fence",
]
