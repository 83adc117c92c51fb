"""The producer side enqueues runs and asks about them.

``AsyncClient`` is the one door to runs for programs, the CLI, the fleet views and the dashboard:
nothing else touches the store or the queue on their behalf. It is composed from one mixin per
family over ``core.py`` (settings, store, queue, open and close, ``status``):

- ``admission.py``: ``enqueue``, ``enqueue_many``, ``continue_run``; every value checked by
  ``checks.py`` before anything is written, the run's row (state ``queued``, with the producer's
  trace context) and its event committed first, then its id ``XADD``ed. A delayed run's id is
  published by a sweeper at its start; a tenant's run beyond its window (``OUTLAST_TENANT_WINDOW``)
  is *held* (``published_at`` NULL, no entry) until a claim of the tenant's runs or the sweeper
  publishes it in its turn;
- ``runs.py``: wait and follow (pushed by LISTEN, ``store/notify.py``); list, events, journal,
  budget, verify; cancel (the children level by level) and resume;
- ``decisions.py``: approval requests (approve, reject, revise) and in-doubt resolutions;
- ``admin.py``: migrate, prune, schedules, the counts a live view polls;
- ``fleet.py``: health, workers, queue figures, dead letters (requeued through Postgres first),
  and the charts, read from their rollup.

``Client`` (``sync.py``) runs a program's share of ``AsyncClient`` (enqueue, wait, follow, read,
cancel, resume, decide, resolve, prune, schedules) on a private loop thread, through one generic
wrapper per family, with no logic of its own; the CLI, the fleet views and the dashboard use
``AsyncClient`` itself.
"""

from outlast.producer.client import AsyncClient
from outlast.producer.sync import Client

__all__ = ["AsyncClient", "Client"]
