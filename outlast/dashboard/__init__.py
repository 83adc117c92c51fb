"""The dashboard: a web page and a JSON API where people see runs, decide approvals and resolve
in-doubt operations as who they really are (``outlast dashboard``, or ``create_app`` mounted in an
application's own ASGI app). Needs the ``dashboard`` extra: ``pip install 'outlast[dashboard]'``."""

from outlast.dashboard.app import create_app

__all__ = ["create_app"]
