"""An app that imports in the process that starts a worker pool but not in its children: each
child dies at start (the pool's test of a child that keeps dying before it can serve)."""

from __future__ import annotations

import multiprocessing

from outlast import App

if multiprocessing.parent_process() is not None:
    raise ImportError("this app refuses to load in a worker process (a test of the pool)")

app = App()
