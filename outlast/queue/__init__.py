"""Redis Streams: how work is handed out. The only package that speaks to Redis."""

from outlast.queue.streams import Delivery, Queue

__all__ = ["Delivery", "Queue"]
