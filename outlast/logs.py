"""Structured logs: JSON in production (or when not on a terminal), readable lines on a terminal."""

from __future__ import annotations

import logging
import sys

import structlog


def configure(fmt: str = "auto", level: int = logging.INFO) -> None:
    """``fmt``: ``json``, ``console`` or ``auto`` (console on a terminal, JSON otherwise)."""
    json_out = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer(ensure_ascii=False)
        if json_out
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    printer = structlog.PrintLogger(sys.stderr)  # one for every logger: it holds only the file
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,  # the worker id, bound once per worker
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        # A factory handing out the one printer: a bound logger is built on every ``bind()`` and
        # every call of a module's logger, and a new printer each time cost a run's share of CPU.
        logger_factory=lambda *_: printer,
        cache_logger_on_first_use=False,
    )
