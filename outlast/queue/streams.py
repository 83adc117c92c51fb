"""Each queue has one stream, read by one consumer group. An entry says only which run to take:
Postgres holds everything else, so a lost or repeated entry costs a claim, never a result.

Keys carry the queue in a hash tag (``outlast:{default}:runs``) so that one queue's keys live
in one Redis Cluster slot and queues spread over the cluster. A ``redis+cluster://host:port``
URL (``rediss+cluster://`` with TLS; any one node: the client finds the rest) speaks to a Redis
Cluster. No command there spans two queues' slots: a pipeline may, and the cluster client splits it
per node; the data-loss marker is then one per queue (``outlast:{default}:alive``), in the slot of
the stream it vouches for.

The client speaks bytes (``decode_responses=False``) and fields are decoded here, one entry at
a time: an entry nobody can serve (not UTF-8, no run id, a run id no producer makes) comes back
as a ``Delivery`` that names its ``problem``, instead of failing the whole batch it came in.
"""

from __future__ import annotations

from outlast.queue.connection import CLUSTER_SCHEMES, is_cluster_url
from outlast.queue.dead import DeadLetters
from outlast.queue.entries import GROUP, LEVELS, MAX_RUN_ID, Delivery, QueueFigures, run_id_problem
from outlast.queue.figures import Figures
from outlast.queue.groups import ConsumerGroup
from outlast.queue.publishing import Publishing
from outlast.queue.undelivered import Streams, Waiting

__all__ = [
    "CLUSTER_SCHEMES",
    "GROUP",
    "LEVELS",
    "MAX_RUN_ID",
    "Delivery",
    "Queue",
    "QueueFigures",
    "Waiting",
    "is_cluster_url",
    "run_id_problem",
]


class Queue(Publishing, ConsumerGroup, DeadLetters, Figures, Streams):
    """``Queue`` publishes, reads, reclaims, acknowledges and dead-letters run entries: the parts
    (``connection``, ``publishing``, ``groups``, ``dead``, ``figures``,
    ``undelivered``) over one client.

    A ``client`` given must not decode responses (``decode_responses=False``): a decoding
    client fails a whole read on one entry that is not UTF-8."""
