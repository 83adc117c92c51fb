"""The dashboard is a web page and a JSON API where people see runs, decide approvals and resolve
in-doubt operations as who they really are. It is served by ``outlast dashboard``, or by
``create_app`` mounted in an application's own ASGI app. Needs the ``dashboard`` extra:
``pip install 'outlast[dashboard]'``.

Every request is authenticated (``auth.py``: bearer token, session or trusted header; the users
file read again when it changes); roles are viewer, operator and approver, and every act checks its
own (``web.py``); forms carry a CSRF token, every response a Content-Security-Policy (``app.py``).
The handlers, by family: ``api.py`` (the JSON endpoints and their route table), ``pages.py`` (the
pages and their route table), ``operate.py`` (schedules, the fleet), ``signin.py``, ``live.py``
(server-sent events woken by LISTEN on one connection per process, ``AsyncClient.watch_runs``;
polling behind a transaction pooler), ``lists.py`` (the runs list's query string), ``batch.py`` (acts on a
filtered list), ``charts.py`` (SVG of the rollup); what they read is ``views.py``, what they do
``acts.py``, and the pages are made by ``render.py``. The dashboard reads and decides only through
``AsyncClient``, the decider always the authenticated principal.
"""

from outlast.dashboard.app import create_app

__all__ = ["create_app"]
