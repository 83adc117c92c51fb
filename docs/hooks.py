"""The reference pages written from the code, so that they cannot drift from it; and the mkdocs
hooks of the site build.

A page holds a generated part between a marker line and its end marker:

- ``<!-- outlast:cli -->``: every command's ``--help``, as ``outlast CMD --help`` prints it
  (``cli_reference``; ``tests/unit/test_docs.py`` compares it with the real command's output);
- ``<!-- outlast:settings -->``: the settings declared in ``outlast/settings.py``
  (variable, option, default, what it accepts, help);
- ``<!-- outlast:logs -->``: every log event of ``outlast/_log_events.py`` and what it means.

These are written into the Markdown itself (so that the pages read the same on GitHub as on the
site): ``python docs/hooks.py`` rewrites what lies between each marker and its ``<!-- /outlast:...
-->``; ``python docs/hooks.py --check`` only says which pages are stale (exit 1), as
``tests/unit/test_docs.py`` does. Run it after changing a command, a setting or a log event.

One part is made at each site build only: ``<!-- outlast:api -->``, one mkdocstrings block per
public name of ``outlast/__init__.py`` (the blocks are mkdocstrings directives, which only the
build renders).

The pages other engineers add (``redis-ha.md``, ``postgres-ha.md``, ``dashboard.md``) join the
navigation here, and only once their file exists (a nav entry to a missing page fails a strict
build).
"""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path
from typing import Any

import click

# This tree's outlast, whatever the environment has installed.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# The help is rendered as ``outlast --help`` renders it on a terminal 100 columns wide.
HELP_COLUMNS = 100
OPTIONAL_PAGES = {
    "Operating": [
        ("Redis high availability", "redis-ha.md"),
        ("Postgres high availability", "postgres-ha.md"),
        ("The dashboard", "dashboard.md"),
    ]
}


def root_command() -> click.Group:
    """The ``outlast`` command group, as the ``outlast`` script runs it."""
    group = importlib.import_module("outlast.cli").cli
    assert isinstance(group, click.Group)
    return group


def commands(group: click.Group | None = None, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command's path below ``outlast``, groups before their subcommands, by name."""
    group = group or root_command()
    found: list[tuple[str, ...]] = []
    ctx = click.Context(group)
    for name in sorted(group.list_commands(ctx)):
        sub = group.get_command(ctx, name)
        if sub is None or sub.hidden:
            continue
        found.append((*path, name))
        if isinstance(sub, click.Group):
            found.extend(commands(sub, (*path, name)))
    return found


def help_text(path: tuple[str, ...]) -> str:
    """What ``outlast PATH --help`` prints on a terminal ``HELP_COLUMNS`` wide."""
    group = root_command()
    settings = {**group.context_settings, "terminal_width": HELP_COLUMNS - 2}
    ctx = click.Context(group, info_name="outlast", **settings)
    command: click.Command = group
    for name in path:
        assert isinstance(command, click.Group)
        sub = command.get_command(ctx, name)
        assert sub is not None, f"no command outlast {' '.join(path)}"
        command = sub
        ctx = click.Context(command, info_name=name, parent=ctx, **command.context_settings)
    return command.get_help(ctx).rstrip() + "\n"


def cli_reference() -> str:
    parts = ["## outlast\n", "```text", help_text(()).rstrip(), "```\n"]
    for path in commands():
        parts += [f"## outlast {' '.join(path)}\n", "```text", help_text(path).rstrip(), "```\n"]
    return "\n".join(parts)


def _accepts(name: str) -> str:
    from outlast.settings import SPECS

    spec = SPECS[name]
    if spec.choices:
        return "one of " + ", ".join(f"`{c}`" for c in spec.choices)
    if name == "failpoints":
        from outlast._failpoints import POINTS

        return "`name[:tool],...` with names among " + ", ".join(f"`{p}`" for p in sorted(POINTS))
    probe: object = object()
    try:
        spec.validate(probe)
    except ValueError as exc:
        text = str(exc).split(", got ")[0].removeprefix("must be ").removeprefix("is not ")
        return text.replace("[", "\\[").replace("]", "\\]").replace("*", "\\*")
    return "any text"


def _options() -> dict[str, list[str]]:
    """Each environment variable's options, as ``outlast [CMD] --option``."""
    found: dict[str, list[str]] = {}
    for path in [(), *commands()]:
        group: click.Command = root_command()
        ctx = click.Context(group)
        for name in path:
            assert isinstance(group, click.Group)
            got = group.get_command(ctx, name)
            assert got is not None
            group = got
        for param in group.params:
            if isinstance(param, click.Option) and isinstance(param.envvar, str):
                where = " ".join(("outlast", *path))
                found.setdefault(param.envvar, []).append(f"`{where} {param.opts[-1]}`")
    return found


def settings_reference() -> str:
    from dataclasses import MISSING, fields

    from outlast.settings import SPECS, Settings, env_var

    options = _options()
    rows = [
        "| variable | option | default | accepts | what |",
        "|---|---|---|---|---|",
    ]
    for f in fields(Settings):
        default = f.default if f.default is not MISSING else None
        shown = "unset" if default in (None, "") else f"`{default}`"
        var = env_var(f.name)
        opts = ", ".join(options.get(var, [])) or "—"
        rows.append(f"| `{var}` | {opts} | {shown} | {_accepts(f.name)} | {SPECS[f.name].help} |")
    return "\n".join(rows) + "\n"


def logs_reference() -> str:
    from outlast._log_events import EVENTS

    rows = ["| event | what |", "|---|---|"]
    rows += [f"| `{name}` | {what} |" for name, what in EVENTS.items()]
    return "\n".join(rows) + "\n"


def api_reference() -> str:
    import outlast

    return "\n".join(f"::: outlast.{name}\n" for name in sorted(outlast.__all__, key=str.lower))


# Written into the Markdown, between the marker and its end marker.
WRITTEN = {
    "cli": cli_reference,
    "settings": settings_reference,
    "logs": logs_reference,
}
# Made at each build, in place of the marker line.
BUILT = {"<!-- outlast:api -->": api_reference}
DOCS = Path(__file__).resolve().parent


def written_part(kind: str) -> re.Pattern[str]:
    """A page's part of ``kind``: its marker line, what follows, and its end marker line (or, in a
    page never written yet, the marker line alone)."""
    return re.compile(
        rf"^<!-- outlast:{kind} -->\n(?:.*?^<!-- /outlast:{kind} -->\n)?", re.MULTILINE | re.DOTALL
    )


def regenerate(markdown: str) -> str:
    """The page with each written part made again from the code."""
    for kind, make in WRITTEN.items():
        part = f"<!-- outlast:{kind} -->\n{make().rstrip()}\n<!-- /outlast:{kind} -->\n"
        markdown = written_part(kind).sub(lambda _m, part=part: part, markdown)
    return markdown


def stale_pages() -> dict[Path, str]:
    """Each page whose written parts differ from the code, with its text made again."""
    found = {}
    for page in sorted(DOCS.rglob("*.md")):
        text = page.read_text()
        again = regenerate(text)
        if again != text:
            found[page] = again
    return found


def on_config(config: Any) -> Any:
    """Add the optional pages that exist to their section of the navigation."""
    docs = Path(config["docs_dir"])
    for section in config["nav"]:
        if not isinstance(section, dict):
            continue
        for title, entries in section.items():
            for page_title, page in OPTIONAL_PAGES.get(title, []):
                if (docs / page).exists() and isinstance(entries, list):
                    entries.append({page_title: page})
    return config


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    """Replace each build-time marker line by its generated text."""
    lines = markdown.split("\n")
    for i, line in enumerate(lines):
        make = BUILT.get(line.strip())
        if make is not None:
            lines[i] = make()
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """Rewrite the stale pages (with ``--check``: only name them); exit 1 if any was stale."""
    stale = stale_pages()
    for page, text in stale.items():
        if "--check" not in argv:
            page.write_text(text)
        print(f"{'stale' if '--check' in argv else 'rewritten'}: {page.relative_to(DOCS.parent)}")
    return 1 if stale and "--check" in argv else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
