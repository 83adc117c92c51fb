"""The dashboard command serves the web page and JSON API."""

from __future__ import annotations

import click

from outlast.cli.common import option, settings_of, with_client
from outlast.cli.group import cli
from outlast.producer import AsyncClient

# -- the dashboard ---------------------------------------------------------------------------


@cli.command()
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    envvar="OUTLAST_DASHBOARD_HOST",
    show_envvar=True,
    help="Address to listen on (beyond loopback only with users).",
)
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    default=8321,
    show_default=True,
    envvar="OUTLAST_DASHBOARD_PORT",
    show_envvar=True,
    help="Port to listen on.",
)
@click.option(
    "--app",
    "app_spec",
    metavar="MODULE:APP",
    help="The application, to check revised arguments against its tools (optional).",
)
@click.option(
    "--root-path",
    default="",
    envvar="OUTLAST_DASHBOARD_ROOT_PATH",
    show_envvar=True,
    help="The path prefix a reverse proxy serves the dashboard under (e.g. /outlast).",
)
@option("dashboard_secure_cookies", "--secure-cookies")
@click.pass_context
def dashboard(
    ctx: click.Context, host: str, port: int, app_spec: str | None, root_path: str, secure_cookies: str | None
) -> None:
    """The web page and JSON API: runs, approvals, in-doubt operations, the fleet. Needs the
    dashboard extra (pip install 'outlast[dashboard]') and users (OUTLAST_USERS) to sign in."""
    try:
        import uvicorn

        from outlast.dashboard import create_app
        from outlast.dashboard.auth import check_bind
    except ImportError as exc:
        raise click.ClickException(
            f"the dashboard needs {exc.name}: pip install 'outlast[dashboard]'"
        ) from None
    settings = settings_of(ctx).with_(dashboard_secure_cookies=secure_cookies)
    check_bind(host, settings)
    if root_path and (not root_path.startswith("/") or root_path.endswith("/")):
        raise click.BadParameter("a path like /outlast: a leading /, no trailing /", param_hint="--root-path")

    async def reachable(c: AsyncClient) -> None:
        """Postgres answers and the schema is current (Redis is asked when first needed)."""

    with_client(ctx, reachable)
    if app_spec:
        from outlast.worker.pool import load_app

        app = create_app(settings, app=load_app(app_spec))
    else:
        app = create_app(settings)
    click.echo(f"outlast dashboard on http://{host}:{port}{root_path}/ (schema {settings.schema})", err=True)
    # Not uvicorn's proxy headers: it would replace a loopback peer's address with the one its
    # X-Forwarded-For names before the dashboard asks whether the peer is a trusted proxy
    # (OUTLAST_TRUSTED_PROXIES), so any local process could pass for one. The dashboard reads
    # X-Forwarded-For and X-Forwarded-Proto itself, from those proxies only.
    uvicorn.run(
        app,
        host=host,
        port=port,
        root_path=root_path,
        proxy_headers=False,
        log_level="warning",
        timeout_graceful_shutdown=2,
    )
