"""A directory that is not a whole bundle is refused with one line (``InvalidInput``, which the
CLI prints as such), never a traceback: a missing file, a journal line without its hash, a run
record without its fields."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from outlast import _bundle as bundle
from outlast.errors import InvalidInput

KEPT = Path(__file__).parent.parent / "bundles" / "orders" / "order-2-books"


def _copy(tmp_path: Path) -> Path:
    out = tmp_path / "b"
    shutil.copytree(KEPT, out)
    return out


def test_a_whole_bundle_is_read() -> None:
    run, entries = bundle.read(KEPT)
    assert run.journal_len == len(entries) > 0


def test_a_journal_line_without_its_hash_is_refused(tmp_path: Path) -> None:
    b = _copy(tmp_path)
    lines = (b / "journal.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    del first["hash"]
    (b / "journal.jsonl").write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    with pytest.raises(InvalidInput, match="not a bundle made by `outlast export`: no 'hash'"):
        bundle.read(b)


def test_a_run_record_without_its_fields_is_refused(tmp_path: Path) -> None:
    b = _copy(tmp_path)
    (b / "last_state.json").write_text(json.dumps({"run": {"id": "x"}}))
    with pytest.raises(InvalidInput, match="not a bundle made by `outlast export`"):
        bundle.read(b)
    (b / "last_state.json").write_text("[]")
    with pytest.raises(InvalidInput, match="not a bundle made by `outlast export`"):
        bundle.read(b)
