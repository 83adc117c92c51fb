"""The ``outlast`` command has one subcommand per task, one module per family of commands (as Celery
and rq keep theirs). Settings are parsed once, by the group (``group.py``); importing a family
registers its commands on it: ``worker`` here, the others on first need (``group.FAMILIES``).

Families: ``runs.py`` (enqueue, cancel, continue, resume), ``reads.py`` (status, runs, events,
export, verify), ``artifacts.py``, ``decisions.py`` (resolve, approve, reject, revise),
``messages.py`` (send), ``requests.py`` (requests, respond), ``fleet.py`` (health, workers, queues,
dead-letters), ``schedules.py``, ``admin.py`` (migrate, prune, users), ``dev.py`` (dev, demo),
``replay.py``, ``worker.py`` and ``dashboard.py``; ``common.py`` makes each option from its
setting's declaration. A command reads and writes runs only through the producer (``AsyncClient``),
never the store or the queue. A user's mistake is one line and exit 2, a refusal exit 1
(``group.main``).
"""

from outlast.cli import worker
from outlast.cli.group import FAMILIES, cli, main

__all__ = ["FAMILIES", "cli", "main", "worker"]
