"""Logs are structured: JSON in production (or when not on a terminal), readable lines on a terminal."""

from __future__ import annotations

import logging
import sys

import structlog

# The keys of a log line that carry a tool's arguments, its result or a captured request: kept
# only with ``OUTLAST_LOG_PAYLOADS=on`` (``show_payloads``), dropped from every line otherwise.
PAYLOAD_KEYS = ("args", "result", "request")
_payloads = False


def show_payloads(on: bool) -> None:
    """``OUTLAST_LOG_PAYLOADS``: whether log lines may carry tool arguments and results."""
    global _payloads
    _payloads = on


def payloads() -> bool:
    """Whether log lines carry payloads: a call site asks before it builds one."""
    return _payloads


def drop_payloads(
    _logger: object, _name: str, event_dict: structlog.types.EventDict
) -> structlog.types.EventDict:
    """A processor: with payloads off, no line carries a tool's arguments, result or request."""
    if not _payloads:
        for key in PAYLOAD_KEYS:
            event_dict.pop(key, None)
    return event_dict


class Library(logging.Handler):
    """The libraries' own log records (psycopg_pool's ``error connecting in 'pool-1'``, asyncio's)
    as structured lines: ``library.log`` with the record's ``logger`` and ``message``. Without it
    Python prints them as plain lines, in the middle of a JSON log."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            extra = {}
            if record.exc_info:
                extra["exception"] = logging.Formatter().formatException(record.exc_info)
            message = record.getMessage()
            structlog.get_logger(record.name).log(
                record.levelno, "library.log", logger=record.name, message=message, **extra
            )
        except Exception:  # a log line must never break its caller
            self.handleError(record)


def route_libraries(on: bool) -> None:
    """Send the standard library's log records (warnings and up) through the structured log, or
    stop (``on`` False); one handler at most, however often it is called."""
    root = logging.getLogger()
    for h in [h for h in root.handlers if isinstance(h, Library)]:
        root.removeHandler(h)
    if on:
        root.addHandler(Library(logging.WARNING))


def configure(fmt: str = "auto", level: int = logging.INFO) -> None:
    """``fmt``: ``json``, ``console`` or ``auto`` (console on a terminal, JSON otherwise). In JSON
    every line is JSON: the libraries' log records go through the structured log too."""
    json_out = fmt == "json" or (fmt == "auto" and not sys.stderr.isatty())
    route_libraries(json_out)
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer(ensure_ascii=False)
        if json_out
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    printer = structlog.PrintLogger(sys.stderr)  # one for every logger: it holds only the file
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,  # the worker id, bound once per worker
            drop_payloads,
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
