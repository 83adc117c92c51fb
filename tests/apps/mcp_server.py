"""A real MCP server (the ``mcp`` package's ``MCPServer``), run as its own process by the MCP tests:
over stdio (``python -m tests.apps.mcp_server``) or streamable HTTP (``... http PORT``).

Its three tools declare their effect in their annotations: ``find_order`` is read-only,
``refund`` idempotent (the refund is made once per idempotency key the call's ``_meta`` carries),
``email_customer`` neither. Every call is counted in ``mcp_calls`` with the key it carried, in the
test's schema (``tests.apps.connect``). ``MCP_DIE_IN=TOOL``: a call of TOOL, its effect made, kills
the process that called it (the worker whose stdio child this server is) before it answers."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations

from tests.apps import connect, setup_tables

IDEMPOTENCY_KEY_META = "outlast/idempotency-key"  # what the server reads, as any server would

TABLES = """
CREATE TABLE IF NOT EXISTS mcp_calls (id serial PRIMARY KEY, tool text NOT NULL, key text);
CREATE TABLE IF NOT EXISTS mcp_refunds (key text PRIMARY KEY, order_id text NOT NULL, amount int NOT NULL);
CREATE TABLE IF NOT EXISTS mcp_emails (id serial PRIMARY KEY, recipient text NOT NULL);
"""

server = MCPServer("shop")


def setup(database_url: str, schema: str) -> None:
    setup_tables(database_url, schema, TABLES)


def _called(tool: str, ctx: Context) -> str | None:
    key: str | None = (ctx.request_context.meta or {}).get(IDEMPOTENCY_KEY_META)
    with connect() as c:
        c.execute("INSERT INTO mcp_calls (tool, key) VALUES (%s, %s)", (tool, key))
    return key


def _maybe_die(tool: str) -> None:
    """The effect made, before the answer: the caller is killed (once armed by ``MCP_DIE_IN``)."""
    if os.environ.get("MCP_DIE_IN") == tool:
        os.kill(os.getppid(), signal.SIGKILL)
        time.sleep(30)  # the caller is gone: no answer ever reaches it


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def find_order(order_id: str, ctx: Context) -> str:
    """Look an order up."""
    _called("find_order", ctx)
    _maybe_die("find_order")
    return f"order {order_id}: 30"


@server.tool(annotations=ToolAnnotations(idempotent_hint=True, destructive_hint=False))
def refund(order_id: str, amount: int, ctx: Context) -> str:
    """Refund an order, once per idempotency key."""
    key = _called("refund", ctx) or f"unkeyed-{time.monotonic_ns()}"
    with connect() as c:
        c.execute(
            "INSERT INTO mcp_refunds (key, order_id, amount) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
            (key, order_id, amount),
        )
    _maybe_die("refund")
    return f"refunded {amount}"


@server.tool()
def email_customer(to: str, ctx: Context) -> str:
    """Email the customer (no promise about a repeat)."""
    _called("email_customer", ctx)
    with connect() as c:
        c.execute("INSERT INTO mcp_emails (recipient) VALUES (%s)", (to,))
    _maybe_die("email_customer")
    return "sent"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@contextmanager
def serving(port: int, env: dict[str, str] | None = None) -> Iterator[None]:
    """This server over streamable HTTP on ``port``: its own process, in ``env`` (this one's)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.apps.mcp_server", "http", str(port)],
        env=env if env is not None else dict(os.environ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        until = time.monotonic() + 30
        while not listening(port):
            assert proc.poll() is None and time.monotonic() < until, "the MCP server did not start"
            time.sleep(0.1)
        yield
    finally:
        proc.terminate()
        proc.wait(10)


if __name__ == "__main__":
    if sys.argv[1:2] == ["http"]:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio")
