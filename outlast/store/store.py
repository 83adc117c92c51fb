"""The store gives access to Postgres; it is the only place that speaks SQL. ``Store`` is its
connection (``connection.py``) and its migrations (``migrate.py``), and one object per family of
queries over that one connection (``store.runs``, ``store.leases``, ``store.journal``...), each in a
module of its own. A part is given the families it uses (a heartbeat: ``leases`` and ``fleet``),
never the whole store."""

from __future__ import annotations

from functools import cached_property
from typing import Self, cast

from outlast._objects import S3Objects
from outlast._urls import redact
from outlast.settings import Settings
from outlast.store.approvals import Approvals
from outlast.store.artifacts import Artifacts
from outlast.store.base import Family
from outlast.store.budgets import Budgets
from outlast.store.children import Children
from outlast.store.connection import Connection
from outlast.store.first import Firsts
from outlast.store.fleet import Fleet
from outlast.store.flow import Flow
from outlast.store.forks import Forks
from outlast.store.generations import Generations
from outlast.store.journal import Journal
from outlast.store.leases import Leases
from outlast.store.listing import Listing
from outlast.store.messages import Messages
from outlast.store.migrate import MIGRATIONS, SCHEMA_VERSION, Migration, Migrations, schema_sql
from outlast.store.pauses import Pauses
from outlast.store.payloads import Payloads
from outlast.store.records import ChildStart, Claimed, Lease, OnWait, Pruned
from outlast.store.requests import Requests
from outlast.store.rollup import Rollups
from outlast.store.runs import Runs
from outlast.store.schedules import Schedules
from outlast.store.shown import StoreShown
from outlast.store.size import Size
from outlast.store.sweeps import Sweeps

__all__ = [
    "FAMILIES",
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


class Store(Migrations, Connection):
    """``Store`` is one process's access to Postgres: a small pool for reads and one shared-commit writer
    (``Connection``), the schema (``Migrations``), and the queries the engine asks, by family. Each
    family is made over the store's connection when first read (``cached_property``), and kept."""

    @classmethod
    def from_settings(cls, s: Settings, max_size: int = 4, shared_listening: bool = False) -> Self:
        """The store a worker or a client of these settings uses, with the object store that holds
        the payload store's bytes if one is set (``OUTLAST_PAYLOAD_STORE``)."""
        store = super().from_settings(s, max_size, shared_listening)
        store.objects = S3Objects(s.payload_store) if s.payload_store else None
        return store

    runs = cached_property(Runs)
    forks = cached_property(Forks)
    listing = cached_property(Listing)
    leases = cached_property(Leases)
    journal = cached_property(Journal)
    generations = cached_property(Generations)
    approvals = cached_property(Approvals)
    messages = cached_property(Messages)
    pauses = cached_property(Pauses)
    payloads = cached_property(Payloads)
    artifacts = cached_property(Artifacts)
    requests = cached_property(Requests)
    firsts = cached_property(Firsts)
    budgets = cached_property(Budgets)
    children = cached_property(Children)
    fleet = cached_property(Fleet)
    flow = cached_property(Flow)
    schedules = cached_property(Schedules)
    sweeps = cached_property(Sweeps)
    rollups = cached_property(Rollups)
    shown = cached_property(StoreShown)
    size = cached_property(Size)


# The store's families by attribute (``store.leases``: ``Leases``), for what reads them all (the
# offline replay's store, the tests that measure what a part reaches).
FAMILIES: dict[str, type[Family]] = {
    name: cast(type[Family], made.func)
    for name, made in vars(Store).items()
    if isinstance(made, cached_property)
}
