"""The ``outlast`` command: one subcommand per task, one module per family of commands (as Celery
and rq keep theirs). Settings are parsed once, by the group (``group.py``); importing a family
registers its commands on it."""

from outlast.cli import admin, dashboard, decisions, dev, fleet, reads, replay, runs, schedules, worker
from outlast.cli.group import cli, main

__all__ = [
    "admin",
    "cli",
    "dashboard",
    "decisions",
    "dev",
    "fleet",
    "main",
    "reads",
    "replay",
    "runs",
    "schedules",
    "worker",
]
