"""The producer side: enqueue runs and ask about them."""

from outlast.producer.client import AsyncClient, Client

__all__ = ["AsyncClient", "Client"]
