"""The ``outlast`` command: one subcommand per task, one module per family of commands (as Celery
and rq keep theirs). Settings are parsed once, by the group (``group.py``); importing a family
registers its commands on it: ``worker`` here, the others on first need (``group.FAMILIES``)."""

from outlast.cli import worker
from outlast.cli.group import FAMILIES, cli, main

__all__ = ["FAMILIES", "cli", "main", "worker"]
