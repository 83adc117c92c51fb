"""The worker side holds the loop, the run executor (replay), heartbeats, reclaiming, sweeping.

A run, as a worker takes it. ``Intake`` reads an entry (``XREADGROUP``, from the priority levels
of its queues by weight) or reclaims one idle for a whole lease (``XAUTOCLAIM``, ahead of new
work); ``Claims`` claims the run in one conditional ``UPDATE`` that bumps the fencing token and
sets the lease from the database clock, only for the entry's own queue (for a tenant's run, the
same statement publishes the tenant's next held run, whose entry the worker adds). A worker that
does not serve the run's program (a rolling deploy) hands it back to the queue (a new entry, with a
backoff) while a live worker serves it (``served_programs``, ``workers``), and only then parks it
``waiting/program_changed``. ``Heartbeat`` renews every held lease each TTL/3 in one statement on a
connection of its own (unanswered within 2/3 TTL, the beat fails), then touches in Redis only the
entries of the runs whose lease it proved, so that a worker cut off from Postgres lets its entries
idle with its leases; a run whose token moved on is *lost* (its task is cancelled), one that ended
under its own token is not. ``Execution`` loads the journal in one query, verifies its SHA-256
chain and runs the workflow from the start: journaled crossings are served from memory, the rest
go live. The final state (or a durable wait) is committed, fenced; only then ``Acks`` sends
``XACK`` + ``XDEL``. The ``Sweeper`` re-publishes what Postgres says is due and no entry will
deliver.

An operation, live. ``Run.call`` fixes its id (``Replayer.position``); ``Dispatcher.call``
validates the arguments, seals the secret ones (a keyed hash), serves it from the journal if it is
there (``Replayer.mismatch`` refuses another tool or other arguments), else goes live
(``Replayer.go_live``: cancellation, deadline) through: the policy; a tool's slot and rate
admission (``Gate.operation``, waited for); the budget reservation; a **lease proven**
(``RunControl.lease_proven``: at least TTL/3 left, else wait up to one TTL, else leave the run);
the **intention** committed, fenced; the lease proven again; the dispatch (sync tools on reused
daemon threads, ``threads.py``; ``timeout=`` enforced); the **result** committed, fenced. On a
takeover, an intention without a result is resolved by the gap table (``GapTable.resolve``): a
read is redone, an idempotent tool dispatched again with the same key, a reconciler asked;
anything else is in doubt.

Held results (``gaps.holds``: a read, or an idempotent tool with no cost, rates or cap). The result
is chained at once by the replayer (``Replayer.hold``) and kept by the run's ``JournalWrites``
(``writes.py``) for at most ``OUTLAST_HOLD_MS`` and ``OUTLAST_HOLD_MAX`` entries while the workflow
goes on; a read journals no intention (its result names tool, arguments, hash and start:
``replayer.asked_by_result``). The held entries are written first in the run's next append
(``Replayer.append``, ``JournalWrites.commit``: one ``append`` statement, all or none, whose
``journal_len`` condition keeps the chain's order; queued on the writer at once, ``submit_append``,
so it is made even if its caller is cancelled, its outcome read by a callback,
``JournalWrites._written``), by the timer, or by ``JournalWrites.flush``. Every other fenced write
awaits that flush first through ``JournalWrites.fenced(what, write)`` (finish, wait, park, slot,
reserve, child, child wait, approval, release), and so does ``Dispatcher.call`` before a tool whose
result is not held goes live (the write tells it of a cancellation first). The final state goes in
the same shared commit, after the held entries (``fenced(..., chained=True)``:
``JournalWrites.send`` queues them without waiting), and the ``finish`` statement's
``journal_len`` condition refuses it unless they were written. A flush that failed (fenced,
Postgres gone) is kept and raised by the run's next write: nothing chained after it is ever
written. ``tests/unit/test_held_flush.py`` finds each fenced write in this package;
``tests/crash/test_held_crash.py`` kills a worker at each.
"""

from outlast.worker.executor import Execution, Outcome
from outlast.worker.loop import Worker
from outlast.worker.pool import load_app, serve

__all__ = ["Execution", "Outcome", "Worker", "load_app", "serve"]
