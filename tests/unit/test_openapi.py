"""The OpenAPI document (outlast/dashboard/openapi.py) names every route of the JSON API and the
callbacks endpoint, with its methods, and nothing else; every other route of the dashboard is a
page. A route added without being described fails here."""

from __future__ import annotations

import re

import schemathesis
from starlette.routing import BaseRoute, Mount, Route

from outlast.dashboard import charts, create_app, lists, openapi, pages
from outlast.dashboard.openapi import DESCRIBED, DOCUMENT
from outlast.settings import Settings


def _operations(routes: list[BaseRoute]) -> set[tuple[str, str]]:
    """(method, path as OpenAPI writes it) of each route under DESCRIBED (HEAD comes with GET)."""
    return {
        (method.lower(), re.sub(r"\{(\w+):\w+\}", r"{\1}", r.path))
        for r in routes
        if isinstance(r, Route) and r.path.startswith(DESCRIBED)
        for method in (r.methods or set()) - {"HEAD"}
    }


def test_the_document_names_every_route_with_its_methods() -> None:
    app = create_app(Settings())  # nothing is reached before a request
    described = {(method, path) for path, item in DOCUMENT["paths"].items() for method in item}
    assert _operations(app.routes) == described
    assert len(described) >= 25  # the API's routes are there to compare, not an empty list
    page_paths = {r.path for r in [*pages.routes(), *charts.routes()] if not r.path.startswith(DESCRIBED)}
    others = {getattr(r, "path", "") for r in app.routes if not getattr(r, "path", "").startswith(DESCRIBED)}
    assert others == page_paths | {"/static"}  # every other route is a page (or the static files)
    assert any(isinstance(r, Mount) and r.path == "/static" for r in app.routes)


def test_the_lists_of_the_document_are_the_code_s() -> None:
    """What the document enumerates is what the code takes: the runs list's filters, the charts'
    windows."""
    assert [p["name"] for p in openapi.FILTERS] == list(lists.PARAMS)
    assert openapi.WINDOWS == list(charts.WINDOWS)


def test_the_document_is_valid_openapi() -> None:
    schema = schemathesis.openapi.from_dict(DOCUMENT)
    schema.validate()
    assert {op.ok().label for op in schema.get_all_operations()} >= {"POST /callbacks/{token}"}
