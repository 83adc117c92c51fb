"""The documentation holds to the code: the site builds strictly, the generated reference is what
the commands print, every glossary term links to its entry at its first use on each page, every
``outlast`` command line parses, and no page cites a tracker's issue numbers.

The Python blocks of the pages are executed by ``tests/integration/test_doc_examples.py``.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import click
import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
GLOSSARY = DOCS / "glossary.md"

# Each term the glossary must define, and the forms of it a page may use (whole words, any case).
TERMS: dict[str, str] = {
    "run": r"runs?",
    "workflow": r"workflows?",
    "tool": r"tools?",
    "operation": r"operations?",
    "crossing": r"crossings?",
    "intention": r"intentions?",
    "result": r"results?",
    "lease": r"leases?",
    "fencing token": r"fencing tokens?",
    "in doubt": r"in[ -]doubt",
    "reconciler": r"reconcilers?",
    "gap table": r"gap tables?",
    "replay": r"replay(?:s|ed|ing)?",
    "program": r"programs?",
    "sweeper": r"sweepers?",
    "continuation": r"continuations?",
    "child run": r"child runs?",
    "tenant": r"tenants?",
    "window": r"windows?",
}


def anchor(term: str) -> str:
    return term.replace(" ", "-")


def load_hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("outlast_docs_hooks", DOCS / "hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- the build --------------------------------------------------------------------------------


def test_site_builds_strictly(tmp_path: Path) -> None:
    """A broken link, a missing anchor, an unresolved reference or a warning fails the build."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    cli_page = (tmp_path / "site" / "reference" / "cli" / "index.html").read_text()
    assert "outlast worker" in cli_page and "Serve the workflows of MODULE:APP" in cli_page
    api_page = (tmp_path / "site" / "reference" / "api" / "index.html").read_text()
    assert 'id="outlast.Client"' in api_page and 'id="outlast.fence"' in api_page


def test_no_issue_numbers() -> None:
    top = [ROOT / name for name in ("README.md", "CONTRIBUTING.md", "ARCHITECTURE.md", "mkdocs.yml")]
    for path in [*top, *PAGES]:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            assert not re.search(r"issue\s*#?\s*\d|#\d", line, re.IGNORECASE), f"{path}:{n}: {line}"


# -- the generated reference ----------------------------------------------------------------


# Prints ``outlast CMD --help`` for each command given as JSON on stdin, as the ``outlast`` script
# does (``outlast.cli.main``), each followed by a separator line: one process for every command.
HELP_ALL = """
import json, sys
from outlast import cli
for path in json.load(sys.stdin):
    sys.argv = ["outlast", *path, "--help"]
    try:
        cli.main()
    except SystemExit as exc:
        assert exc.code in (0, None), exc.code
    print("\\x00", flush=True)
"""


def test_cli_reference_is_what_help_prints() -> None:
    """Each generated block is the real ``outlast CMD --help``, as a terminal 100 columns wide
    shows it; and every command is there."""
    hooks = load_hooks()
    paths = [(), *hooks.commands()]
    assert ("worker",) in paths and ("users", "add") in paths
    env = {**os.environ, "COLUMNS": str(hooks.HELP_COLUMNS), "PYTHONPATH": str(ROOT)}
    printed = subprocess.run(
        [sys.executable, "-c", HELP_ALL],
        input=json.dumps(paths),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout.split("\x00\n")
    assert len(printed) == len(paths) + 1
    for path, out in zip(paths, printed, strict=False):
        assert hooks.help_text(path) == out, f"outlast {' '.join(path)} --help differs from the docs"
    page = hooks.cli_reference()
    assert all(f"## outlast {' '.join(p)}\n" in page for p in paths[1:])


def written(page: str, kind: str) -> str:
    """What the Markdown of ``docs/PAGE`` holds between the ``kind`` marker and its end."""
    text = (DOCS / page).read_text()
    m = re.search(rf"^<!-- outlast:{kind} -->\n(.*?)^<!-- /outlast:{kind} -->$", text, re.M | re.S)
    assert m, f"docs/{page}: no <!-- outlast:{kind} --> ... <!-- /outlast:{kind} --> part"
    return m[1]


def test_reference_pages_hold_what_the_code_makes() -> None:
    """The command, settings and log-event references are written into the Markdown (so that
    GitHub shows them too), and are what the code makes now: a command, a setting or an event
    added, removed or changed without ``python docs/hooks.py`` fails here."""
    stale = load_hooks().stale_pages()
    assert not stale, f"stale: {', '.join(map(str, stale))}: run python docs/hooks.py and commit"


def test_settings_page_has_every_setting() -> None:
    from dataclasses import fields

    from outlast.settings import Settings, env_var

    table = written("reference/settings.md", "settings")
    for f in fields(Settings):
        assert f"| `{env_var(f.name)}` |" in table, f"{env_var(f.name)} missing from the settings page"
    assert "`outlast worker --lease-ttl`" in table
    assert "a finite number of seconds in \\[0.5, 3600\\]" in table


def test_cli_page_has_every_command() -> None:
    """Every command has its help in the Markdown, and a line in the commands at a glance."""
    hooks = load_hooks()
    page = (DOCS / "reference" / "cli.md").read_text()
    helps = written("reference/cli.md", "cli")
    glance = page.split("## Commands at a glance", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `outlast ([^`|]*?(?:\\\|[^`|]*?)*)[` ]", glance, re.M)
    said = {name for row in rows for name in row.split("\\|")}  # approve\|reject\|revise: three
    for path in hooks.commands():
        name = " ".join(path)
        block = f"## outlast {name}\n\n```text\n{hooks.help_text(path)}```"
        assert block in helps, f"outlast {name}: its help is not on the page as it prints"
        listed = name in said or f"| `outlast {name} " in glance  # or a row of its own
        assert listed, f"outlast {name} is not in the commands at a glance"


STATED_DEFAULT = re.compile(
    r"`OUTLAST_(\w+)`[^`.;]{0,25}?\b(\d+(?:\.\d+)?)\s+(?:seconds?\s+|s\s+)?by\s+default"
)


def test_defaults_the_pages_state_are_the_declared_ones() -> None:
    """Where a page says a setting's default next to its variable ("`OUTLAST_LEASE_TTL`, 30
    seconds by default"), it is the default ``outlast/settings.py`` declares."""
    from dataclasses import fields

    from outlast.settings import Settings

    declared = {f.name.upper(): f.default for f in fields(Settings)}
    seen = 0
    for page in [ROOT / "README.md", *PAGES]:
        for m in STATED_DEFAULT.finditer(page.read_text()):
            assert m[1] in declared, f"{page.relative_to(ROOT)}: no setting OUTLAST_{m[1]}"
            assert float(m[2]) == float(str(declared[m[1]])), (
                f"{page.relative_to(ROOT)}: OUTLAST_{m[1]} is {declared[m[1]]} by default, not {m[2]}"
            )
            seen += 1
    assert seen >= 4


def test_api_reference_has_every_public_name() -> None:
    import outlast

    text = load_hooks().api_reference()
    assert sorted(re.findall(r"^::: outlast\.(\w+)$", text, re.MULTILINE)) == sorted(outlast.__all__)


def test_metrics_page_names_every_metric() -> None:
    source = (ROOT / "outlast" / "_metrics.py").read_text()
    made = re.findall(r"p\.(Counter|Gauge|Histogram)\(\s*\"(\w+)\"", source)
    assert len(made) >= 10
    page = (DOCS / "reference" / "metrics.md").read_text()
    for kind, name in made:
        shown = f"{name}_total" if kind == "Counter" else name
        assert f"`{shown}`" in page, f"{shown} is not on the metrics page"


# -- the glossary -----------------------------------------------------------------------------

CODE_BLOCK = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
LINK = re.compile(r"!?\[((?:[^\[\]]|\[[^\]]*\])*)\]\(([^)\s]*)[^)]*\)")


def prose(text: str) -> str:
    """The text a reader reads as prose: no code blocks, inline code, comments, headings or parts
    written from the code (each replaced by blanks, so that offsets keep their lines)."""

    def blank(m: re.Match[str]) -> str:
        return re.sub(r"[^\n]", " ", m[0])

    text = CODE_BLOCK.sub(blank, text)
    # a part written from the code (the commands' help, the settings' table): the code's words
    text = re.sub(r"^<!-- outlast:(\w+) -->$.*?^<!-- /outlast:\1 -->$", blank, text, flags=re.M | re.S)
    text = re.sub(r"<!--.*?-->", blank, text, flags=re.DOTALL)
    text = re.sub(r"`[^`\n]*`", blank, text)
    return re.sub(r"^#.*$", blank, text, flags=re.MULTILINE)


@dataclass
class Use:
    line: int
    target: str | None  # the link around it, if any


def uses(page: Path, term: str) -> list[Use]:
    """Every use of ``term`` in the page's prose, in order, with the link it stands in."""
    text = prose(page.read_text())
    links = [(m.start(1), m.end(1), m[2]) for m in LINK.finditer(text)]
    pattern = re.compile(rf"(?<![\w.-]){TERMS[term]}(?![\w-])", re.IGNORECASE)
    longer = [t for t in TERMS if t != term and term in t]  # "run" inside "child run"
    hidden = [m.span() for t in longer for m in re.finditer(TERMS[t], text, re.IGNORECASE)]
    found = []
    for m in pattern.finditer(text):
        if any(a <= m.start() < b for a, b in hidden):
            continue
        target = next((t for a, b, t in links if a <= m.start() < b), None)
        found.append(Use(text.count("\n", 0, m.start()) + 1, target))
    return found


def glossary_target(page: Path, target: str) -> str | None:
    """The glossary anchor a link points to, or None for a link elsewhere."""
    where, _, frag = target.partition("#")
    if where and (page.parent / where).resolve() == GLOSSARY.resolve():
        return frag
    return None


def test_glossary_defines_every_term() -> None:
    headings = re.findall(r"^### (.+)$", GLOSSARY.read_text(), re.MULTILINE)
    assert set(TERMS) <= set(headings), set(TERMS) - set(headings)


@pytest.mark.parametrize("page", [p for p in PAGES if p != GLOSSARY], ids=lambda p: str(p.relative_to(DOCS)))
def test_first_use_of_a_term_links_to_the_glossary(page: Path) -> None:
    wrong = []
    for term in TERMS:
        for use in uses(page, term):
            if use.target is not None and glossary_target(page, use.target) is None:
                continue  # inside a link to another page: not the term's first use
            if use.target is None or glossary_target(page, use.target) != anchor(term):
                wrong.append(
                    f"line {use.line}: first use of '{term}' must link to glossary.md#{anchor(term)}"
                )
            break
    assert not wrong, f"{page.relative_to(ROOT)}:\n" + "\n".join(wrong)


def test_glossary_links_name_real_entries() -> None:
    headings = {anchor(h) for h in re.findall(r"^### (.+)$", GLOSSARY.read_text(), re.MULTILINE)}
    for page in [*PAGES, ROOT / "README.md"]:
        for m in LINK.finditer(prose(page.read_text())):
            if "glossary.md#" in m[2]:
                assert m[2].partition("#")[2] in headings, f"{page}: {m[0]}"


# -- shell blocks -----------------------------------------------------------------------------

SHELL = re.compile(r"^```(?:bash|sh|shell|console)\n(.*?)^```", re.MULTILINE | re.DOTALL)
OPERATORS = {"&&", "||", "|", ";", "&", "(", ")"}


def command_lines(text: str) -> list[list[str]]:
    """Each ``outlast ...`` (or ``python3 -m outlast ...``) command of the page's shell blocks."""
    found = []
    for block in SHELL.findall(text):
        for line in block.replace("\\\n", " ").splitlines():
            lex = shlex.shlex(line, posix=True, punctuation_chars=True)
            lex.whitespace_split = True
            words: list[str] = []
            for word in [*lex, ";"]:
                if word not in OPERATORS:
                    words.append(word)
                    continue
                while words and re.fullmatch(r"[A-Z_]+=.*", words[0]):  # VAR=value before it
                    words.pop(0)
                if words[:3] in (["python3", "-m", "outlast"], ["python", "-m", "outlast"]):
                    words = ["outlast", *words[3:]]
                if words[:1] == ["outlast"]:
                    found.append(words[1:])
                words = []
    return found


def parse(args: list[str]) -> None:
    """Parse ``outlast ARGS`` as the real command would, without running it: the subcommands,
    options, arguments and values are checked (``--help`` parses too)."""
    from outlast.cli import cli

    command: click.Command = cli
    ctx = click.Context(cli, info_name="outlast", **cli.context_settings)
    rest = list(args)
    while isinstance(command, click.Group) and rest and not rest[0].startswith("-"):
        sub = command.get_command(ctx, rest[0])
        assert sub is not None, f"no such command: outlast {' '.join(args)}"
        command = sub
        ctx = click.Context(command, info_name=rest.pop(0), parent=ctx, **command.context_settings)
    try:
        command.parse_args(ctx, rest)
    except click.exceptions.Exit as exc:  # --help
        assert exc.exit_code == 0
    except click.ClickException as exc:
        raise AssertionError(f"outlast {' '.join(args)}: {exc.format_message()}") from None


@pytest.mark.parametrize("page", [ROOT / "README.md", *PAGES], ids=lambda p: str(p.relative_to(ROOT)))
def test_shell_commands_parse(page: Path) -> None:
    for args in command_lines(page.read_text()):
        parse(args)


NAMED_COMMAND = re.compile(r"`{1,2}outlast ([a-z][\w-]*)")
WRITTEN_FILES = [
    *(ROOT / name for name in ("README.md", "CONTRIBUTING.md", "ARCHITECTURE.md")),
    *PAGES,
    *sorted((ROOT / "examples").glob("*.py")),
]


@pytest.mark.parametrize("path", WRITTEN_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_commands_named_in_text_exist(path: Path) -> None:
    """A command named in running text (```outlast approve``` in a docstring, `outlast send` on a
    page) is one ``outlast`` has."""
    known = {p[0] for p in load_hooks().commands()}
    for m in NAMED_COMMAND.finditer(path.read_text()):
        assert m[1] in known, f"{path.relative_to(ROOT)}: {m[0]}: outlast has no command {m[1]!r}"


def test_shell_check_refuses_a_wrong_command() -> None:
    with pytest.raises(AssertionError, match="No such option"):
        parse(["worker", "examples.hello:app", "--concurency", "3"])
    with pytest.raises(AssertionError, match="no such command"):
        parse(["replays", "RUN"])
    block = "```bash\nX=1 outlast runs --limit 5 &  # note\neval x\n```\n"
    assert command_lines(block) == [["runs", "--limit", "5"]]


# -- python blocks and examples ----------------------------------------------------------------

PYTHON = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))


@pytest.mark.parametrize(
    "page",
    [
        p
        for p in [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "ARCHITECTURE.md", *PAGES]
        if "```python" in p.read_text()
    ],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_python_blocks_compile(page: Path) -> None:
    """Every Python block of the README, CONTRIBUTING and the docs compiles (the docs' blocks are
    also run, by tests/integration/test_doc_examples.py)."""
    text = page.read_text()
    for m in PYTHON.finditer(text):
        where = f"{page.relative_to(ROOT)}:{text.count(chr(10), 0, m.start(1)) + 1}"
        compile(m[1], where, "exec", dont_inherit=True)


@pytest.mark.parametrize("module", EXAMPLES, ids=lambda p: p.name)
def test_every_example_imports(module: Path) -> None:
    """Each module of examples/ imports with no server (its tables are made at first use), and each
    app module has an ``app`` whose workflows are registered. Run: tests/integration/test_examples.py
    and test_doc_examples.py."""
    from outlast import App

    if module.stem == "__init__":
        importlib.import_module("examples")
    else:
        loaded = importlib.import_module(f"examples.{module.stem}")
        assert isinstance(loaded.app, App) and loaded.app.workflows, f"{module.name}: no app with workflows"


# -- the README -------------------------------------------------------------------------------


def test_readme_keeps_the_ci_test_command_and_shows_the_example_as_it_is() -> None:
    readme = (ROOT / "README.md").read_text()
    command = "python3 -m pip install -q -e '.[dev]' && python3 -m pytest"
    assert f"```bash\n{command}\n```" in readme
    assert f"{command}\n" in (ROOT / ".ci" / "run").read_text()
    assert "```bash\npython3 -m pip install -q -e '.[embedded]' && python3 -m outlast demo\n```" in readme
    example = (ROOT / "examples" / "hello.py").read_text()
    assert f"```python\n{example}```" in readme
    assert len(example.splitlines()) <= 25
    assert len(readme.splitlines()) <= 120


def test_contributing_links_lead_somewhere() -> None:
    for m in LINK.finditer(prose((ROOT / "CONTRIBUTING.md").read_text())):
        target = m[2].partition("#")[0]
        if target and "://" not in target:
            assert (ROOT / target).exists(), f"CONTRIBUTING.md links to {target}, which does not exist"


def test_readme_links_lead_somewhere() -> None:
    for m in LINK.finditer(prose((ROOT / "README.md").read_text())):
        target = m[2].partition("#")[0]
        if target and "://" not in target:
            assert (ROOT / target).exists(), f"README links to {target}, which does not exist"
