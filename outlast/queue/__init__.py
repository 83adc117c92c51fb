"""Redis Streams: how work is handed out. The only package that speaks to Redis."""

from outlast.queue.rate import RateWindows
from outlast.queue.streams import MAX_RUN_ID, Delivery, Queue, QueueFigures, run_id_problem

__all__ = ["MAX_RUN_ID", "Delivery", "Queue", "QueueFigures", "RateWindows", "run_id_problem"]
