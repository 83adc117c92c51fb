"""This package holds the ASGI apps a user mounts in their own web application. ``callbacks``: the
endpoint of the callback URLs runs hand out (``run.callback``), ready to mount
(``Mount("/callbacks", callbacks)``), its client made from the environment at its first request;
``Callbacks`` to build one with a client or settings of your own."""

from __future__ import annotations

from outlast.web.endpoint import Callbacks

callbacks = Callbacks()

__all__ = ["Callbacks", "callbacks"]
