"""The producer side: enqueue runs and ask about them."""

from outlast.producer.client import AsyncClient
from outlast.producer.sync import Client

__all__ = ["AsyncClient", "Client"]
