"""Every default declared once, in the settings: the store takes its own from there."""

from __future__ import annotations

import ast
import inspect

from outlast.settings import Settings
from outlast.store.connection import Connection

# The store's constructor parameter -> the setting whose default it is.
TAKEN = {"retry_for": "store_retry", "tenant_window": "tenant_window"}


def test_the_store_defaults_are_the_settings() -> None:
    params = inspect.signature(Connection.__init__).parameters
    fn = ast.parse(inspect.getsource(Connection.__init__).strip()).body[0]
    assert isinstance(fn, ast.FunctionDef)
    pairs = zip(fn.args.args[::-1], fn.args.defaults[::-1], strict=False)
    written = {a.arg: ast.unparse(d) for a, d in pairs}
    for param, setting in TAKEN.items():
        assert params[param].default == getattr(Settings, setting)
        again = f"{param}'s default is written again: {written[param]}"
        assert written[param] == f"Settings.{setting}", again
