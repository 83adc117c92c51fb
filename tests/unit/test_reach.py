"""A Postgres that answers but refuses writes (a standby not promoted, or
``default_transaction_read_only`` on) is named as such in the worker's line, with the way out."""

from __future__ import annotations

from outlast.store.reach import unreachable


def test_a_read_only_refusal_names_its_way_out() -> None:
    err = unreachable(
        Exception("cannot execute UPDATE in a read-only transaction"), "postgresql://u:secret@db:5432/app"
    )
    assert "refuses writes: a standby not promoted, or default_transaction_read_only on" in str(err)
    assert "OUTLAST_DATABASE_URL at the primary" in str(err) and "secret" not in str(err)
