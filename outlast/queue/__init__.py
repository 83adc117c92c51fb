"""The queue hands out work on Redis Streams; it is the only package that speaks to Redis.

Streams (one per queue and priority level), their consumer group, dead letters, shared rate
windows (``rate.py``) and the data-loss marker; on a single server, a Redis Cluster
(``redis+cluster://``, one slot per queue) or Redis Sentinel (``redis+sentinel://``,
``sentinel.py``; a failover is seen by the marker's script as data loss: docs/redis-ha.md).
``Queue`` (``streams.py``) is composed of parts: ``connection.py`` (the client from the URL, key
names, outage errors), ``publishing.py`` (publication and the marker), ``groups.py`` (read,
reclaim, ack, touch), ``dead.py``, ``figures.py`` and ``undelivered.py`` (which entries still wait
in a stream, for the sweeper); ``entries.py`` decodes an entry. Its one import from the store is
``redact``, to show a URL in a message.
"""

from outlast.queue.rate import RateWindows
from outlast.queue.streams import MAX_RUN_ID, Delivery, Queue, QueueFigures, run_id_problem

__all__ = ["MAX_RUN_ID", "Delivery", "Queue", "QueueFigures", "RateWindows", "run_id_problem"]
