"""Mistakes refused where they are given, at once, naming where: an enqueue's input with a value JSON
has no form for, or that does not fit the workflow's signature (with the app known), stores nothing;
a Decimal is stored as its JSON form at once, never a hang."""

from __future__ import annotations

import time
from decimal import Decimal

import pytest

from outlast import Client, InvalidInput
from tests.apps.basic import app
from tests.conftest import World


def test_an_input_with_no_json_form_is_refused_at_once_naming_where(world: World) -> None:
    with Client(settings=world.settings()) as c:
        began = time.monotonic()
        with pytest.raises(InvalidInput, match=r"the input is refused: .*at \.order\.lines\[0\]: a object"):
            c.enqueue("echo", {"order": {"lines": [object()]}})
        assert time.monotonic() - began < 5  # refused, not retried as an outage
        run = c.enqueue("echo", {"amount": Decimal("1.50")})
    assert world.sql("SELECT input FROM runs") == [({"amount": "1.50"},)]
    assert run.state == "queued"


def test_an_input_that_does_not_fit_the_workflow_is_refused_with_the_app(world: World) -> None:
    with Client(settings=world.settings(), app=app) as c:
        with pytest.raises(
            InvalidInput, match=r"does not fit workflow 'slow': got an unexpected keyword.*'secs'"
        ):
            c.enqueue("slow", {"secs": 1})
        with pytest.raises(InvalidInput, match=r"does not fit workflow 'boom'"):
            c.enqueue("boom", {"run": 1})
        c.enqueue("slow", {"seconds": 0.1})
    assert world.sql("SELECT workflow FROM runs") == [("slow",)]
