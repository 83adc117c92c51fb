"""Mistakes refused where they are made, at registration, with the way out: an unknown effect, a
tool or workflow registered twice, and a name not found answered with the nearest one."""

from __future__ import annotations

import pytest

from outlast import App, UnknownTool, UnknownWorkflow
from outlast.errors import ConfigError


def test_an_unknown_effect_is_refused_with_the_nearest() -> None:
    app = App()
    with pytest.raises(TypeError, match=r"effect='reed' is not one of write, read \(did you mean 'read'\?\)"):

        @app.tool("fetch", effect="reed")  # type: ignore[arg-type]
        def fetch(url: str) -> str:
            return url


def test_a_tool_or_workflow_registered_twice_is_refused() -> None:
    app = App()

    @app.tool("send")
    def send(to: str) -> str:
        return to

    with pytest.raises(TypeError, match="tool 'send' is registered twice"):

        @app.tool("send")
        def send_again(to: str) -> str:
            return to

    @app.workflow("w")
    async def w(run: object) -> None:
        return None

    with pytest.raises(TypeError, match="workflow 'w' is registered twice"):

        @app.workflow("w")
        async def w_again(run: object) -> None:
            return None


def test_a_name_not_found_says_did_you_mean() -> None:
    app = App()

    @app.tool("email_receipt")
    def email_receipt(to: str) -> str:
        return to

    @app.workflow("refund")
    async def refund(run: object) -> None:
        return None

    with pytest.raises(UnknownTool, match="did you mean 'email_receipt'"):
        app.get_tool("emial_receipt")
    with pytest.raises(UnknownWorkflow, match="did you mean 'refund'"):
        app.get_workflow("refnud")
    app.check()  # nothing to refuse
    app.reconciler("emial_receipt")(lambda args: None)
    with pytest.raises(ConfigError, match=r"@app.reconciler\('emial_receipt'\) names no tool"):
        app.check()


def test_a_call_holding_a_value_with_no_json_form_or_a_set_is_refused_naming_where() -> None:
    from decimal import Decimal

    from outlast import InvalidInput

    app = App()

    @app.tool("ship")
    def ship(order: object, tags: set[str] | None = None) -> None:
        return None

    tool = app.tools["ship"]
    with pytest.raises(InvalidInput, match=r"tool 'ship': at \.order\.lines\[1\]: a object, which JSON has"):
        tool.validate({"order": {"lines": [1, object()]}})
    with pytest.raises(InvalidInput, match=r"tool 'ship': at \.tags: a set, whose order changes"):
        tool.validate({"order": 1, "tags": {"b", "a"}})
    assert tool.validate({"order": Decimal("1.50")}) == {"order": "1.50", "tags": None}  # its JSON form
