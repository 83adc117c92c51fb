"""A worker's clock far off: ``NEMESIS_CLOCK_OFFSET`` seconds added to ``time.time`` (and
``time.time_ns``) of every Python process started with this directory first on PYTHONPATH.
outlast takes every lease, due time and deadline from the database's clock: the nemesis runs one
worker this way and expects nothing to change."""

import os
import time

_offset = float(os.environ.get("NEMESIS_CLOCK_OFFSET", "0") or 0)
if _offset:
    _time, _time_ns = time.time, time.time_ns
    time.time = lambda: _time() + _offset
    time.time_ns = lambda: _time_ns() + int(_offset * 1e9)
