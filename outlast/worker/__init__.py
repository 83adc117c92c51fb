"""The worker side: the loop, the run executor (replay), heartbeats, reclaiming, sweeping."""

from outlast.worker.executor import Execution, Outcome
from outlast.worker.loop import Worker
from outlast.worker.pool import load_app, serve

__all__ = ["Execution", "Outcome", "Worker", "load_app", "serve"]
