"""The store gives access to Postgres; it is the only place that speaks SQL. ``Store`` is composed
of its connection (``connection.py``), its migrations (``migrate.py``) and one mixin per family of
queries, each in a module of its own; it defines nothing itself."""

from __future__ import annotations

from outlast._urls import redact
from outlast.store.approvals import Approvals
from outlast.store.budgets import Budgets
from outlast.store.children import Children
from outlast.store.connection import Connection
from outlast.store.first import Firsts
from outlast.store.fleet import Fleet
from outlast.store.flow import Flow
from outlast.store.generations import Generations
from outlast.store.journal import Journal
from outlast.store.leases import Leases
from outlast.store.listing import Listing
from outlast.store.messages import Messages
from outlast.store.migrate import MIGRATIONS, SCHEMA_VERSION, Migration, Migrations, schema_sql
from outlast.store.payloads import Payloads
from outlast.store.records import ChildStart, Claimed, Lease, OnWait, Pruned
from outlast.store.requests import Requests
from outlast.store.rollup import Rollups
from outlast.store.runs import Runs
from outlast.store.schedules import Schedules
from outlast.store.shown import Shown
from outlast.store.sweeps import Sweeps

__all__ = [
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "ChildStart",
    "Claimed",
    "Lease",
    "Migration",
    "OnWait",
    "Pruned",
    "Store",
    "redact",
    "schema_sql",
]


class Store(
    Connection,
    Migrations,
    Runs,
    Listing,
    Leases,
    Journal,
    Generations,
    Approvals,
    Messages,
    Requests,
    Firsts,
    Budgets,
    Children,
    Fleet,
    Flow,
    Schedules,
    Sweeps,
    Rollups,
    Shown,
    Payloads,
):
    """``Store`` is one process's access to Postgres: a small pool for reads and one shared-commit writer
    (``Connection``), the schema (``Migrations``), and the queries the engine asks, by family."""
