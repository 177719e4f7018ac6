"""The package and its tests keep their shape (docs/architecture.md): mypy --strict and
ruff clean, no import cycle, the Redis layer at the bottom and alone in building commands, a
folder per band with no circle between folders and few modules left flat, modules and
classes of a readable size, few ``type: ignore``, a folder of tests for each folder of the
package, and every file a comment or a page names is in the repository. CI fails otherwise."""

from __future__ import annotations

import ast
import fnmatch
import io
import re
import subprocess
import sys
import tokenize
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *command], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


def test_mypy_strict() -> None:
    done = run("mypy")
    assert done.returncode == 0, done.stdout + done.stderr


def test_ruff_lint_and_format() -> None:
    lint = run("ruff", "check", "src", "tests", "bench")
    assert lint.returncode == 0, lint.stdout + lint.stderr
    fmt = run("ruff", "format", "--check", "src", "tests", "bench")
    assert fmt.returncode == 0, fmt.stdout + fmt.stderr


# -- the package's layers: read from the source, so a new module is checked as it lands ---

PACKAGE = ROOT / "src" / "culex"
REDIS_LAYER = "culex._redis"
COMMAND_WORD = re.compile(r"[A-Z]{3,}")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


@dataclass(frozen=True)
class Import:
    """One culex module that one import statement brings in. ``when``: "top" (runs when the
    module is imported), "deferred" (inside a function: runs when it is called) or "typing"
    (under TYPE_CHECKING: never runs)."""

    source: str
    target: str
    when: str
    line: int


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _targets(source: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The culex modules an import statement names (``from . import config`` names the
    module culex.config; ``from .job import Job`` names culex.jobs.job)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names if alias.name in MODULES]
    base = node.module or ""
    if node.level:
        package = source if MODULES[source].name == "__init__.py" else source.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{base}" if base else package
    named = [f"{base}.{alias.name}" for alias in node.names]
    found = [name for name in named if name in MODULES]
    if len(found) < len(named) and base in MODULES:
        found.append(base)
    return found


def _walk(source: str, node: ast.AST, when: str) -> Iterator[Import]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.Import | ast.ImportFrom):
            for target in _targets(source, child):
                yield Import(source, target, when, child.lineno)
        elif isinstance(child, ast.If) and _is_type_checking(child.test):
            for inner in child.body:
                yield from _walk(source, ast.Module([inner], []), "typing")
            for inner in child.orelse:
                yield from _walk(source, ast.Module([inner], []), when)
        elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            yield from _walk(source, child, "typing" if when == "typing" else "deferred")
        else:
            yield from _walk(source, child, when)


def imports() -> list[Import]:
    found: list[Import] = []
    for name, path in MODULES.items():
        found.extend(_walk(name, ast.parse(path.read_text(), str(path)), "top"))
    return found


def find_cycle(edges: Iterable[Import]) -> list[str] | None:
    """A cycle of modules (first module repeated at the end), or None."""
    graph: dict[str, set[str]] = {}
    for edge in edges:
        graph.setdefault(edge.source, set()).add(edge.target)
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> list[str] | None:
        if module in path:
            return [*path[path.index(module) :], module]
        if module in done:
            return None
        for target in sorted(graph.get(module, ())):
            cycle = visit(target, [*path, module])
            if cycle:
                return cycle
        done.add(module)
        return None

    for module in sorted(graph):
        cycle = visit(module, [])
        if cycle:
            return cycle
    return None


def test_the_import_graph_is_read_from_every_module() -> None:
    edges = imports()
    assert {
        "culex.server.configured",
        "culex._redis.calls",
        "culex.jobs.job",
    } <= MODULES.keys()
    kinds = {(edge.source, edge.target): edge.when for edge in edges}
    assert kinds["culex.jobs.job", "culex.jobs.enqueue"] == "top"
    assert kinds["culex.jobs.registry", "culex.jobs.job"] == "typing"  # only names the type
    assert kinds["culex.cli.running", "culex.runner"] == "deferred"  # (the CLI starts fast)
    assert kinds["culex.server.configured", "culex.config"] == "top"  # from . import config
    assert find_cycle([Import("a", "b", "top", 1), Import("b", "a", "top", 1)]) == ["a", "b", "a"]


def test_no_import_cycle() -> None:
    """Modules that run import each other in one direction only, whether the import runs
    with the module or later in a function (a deferred import that closes a cycle only
    hides it). Imports under TYPE_CHECKING are left out: they never run, and two types may
    name each other (the registry holds Job classes; a Job class adds itself to it)."""
    cycle = find_cycle(edge for edge in imports() if edge.when != "typing")
    assert cycle is None, " -> ".join(cycle or ())


def test_the_redis_layer_depends_on_nothing_above_it() -> None:
    """culex._redis is given a URL and options: it reads no settings and starts no server.
    It may raise culex's exceptions (culex.errors imports nothing)."""
    upward = [
        f"{edge.source}:{edge.line} imports {edge.target}"
        for edge in imports()
        if edge.source.startswith(REDIS_LAYER)
        and not edge.target.startswith(REDIS_LAYER)
        and edge.target != "culex.errors"
    ]
    assert upward == []
    assert not [edge for edge in imports() if edge.source == "culex.errors"]


def commands_built(path: Path) -> list[str]:
    """Where a module outside culex._redis builds a Redis command: it makes a ``Call``, hands
    a command word (upper case) to something of culex._redis, or writes a command tuple
    (a command word followed by arguments)."""
    tree = ast.parse(path.read_text(), str(path))
    redis_names = {
        (alias.asname or alias.name).partition(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and "_redis" in (node.module or "")
        for alias in node.names
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            root: ast.expr = node.func
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(node.func, ast.Name | ast.Attribute) and (
                getattr(node.func, "id", None) == "Call" or getattr(node.func, "attr", "") == "Call"
            ):
                found.append(f"{path.name}:{node.lineno} makes a Call")
            elif isinstance(root, ast.Name) and root.id in redis_names:
                for arg in [*node.args, *(keyword.value for keyword in node.keywords)]:
                    if _command_word(arg):
                        found.append(f"{path.name}:{node.lineno} sends {ast.unparse(arg)}")
        elif isinstance(node, ast.Tuple | ast.List) and len(node.elts) > 1:
            first, *rest = node.elts
            if _command_word(first) and not all(_command_word(arg) for arg in rest):
                found.append(f"{path.name}:{node.lineno} writes {ast.unparse(node)}")
    return found


def _command_word(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and COMMAND_WORD.fullmatch(node.value.partition(" ")[0]) is not None
    )


def test_nothing_outside_the_redis_layer_builds_a_command() -> None:
    """Every command is an operation in culex/_redis (docs/architecture.md: Redis lives in
    one place), so a second driver has one list of calls to serve."""
    outside = [path for name, path in MODULES.items() if not name.startswith(REDIS_LAYER)]
    assert [where for path in outside for where in commands_built(path)] == []


def test_the_command_check_finds_a_command(tmp_path: Path) -> None:
    built = tmp_path / "built.py"
    built.write_text(
        "from culex._redis import claims, commands\n"
        "from culex._redis.calls import Call\n"
        'commands.has_command("WAITAOF")\n'
        'Call((), ("CONFIG", "GET", name), parse)\n'
        'send(("GET", key))\n'
        'LEVELS = ["DEBUG", "INFO"]\n'
        'commands.config_get("appendonly")\n'
    )
    assert commands_built(built) == [
        "built.py:3 sends 'WAITAOF'",
        "built.py:4 makes a Call",
        "built.py:4 writes ('CONFIG', 'GET', name)",
        "built.py:5 writes ('GET', key)",
    ]


# -- the layout: a folder per band, rooms of a readable size, tests that mirror them ------

# The modules that lie flat in src/culex: the facade (culex/__init__.py), the command's
# entry, the settings, the demo, the Django app, the exceptions, the log and the tracing.
# Anything else lives in the folder of its band.
FLAT = {"__init__", "__main__", "config", "demo", "django", "errors", "logs", "tracing"}
MODULE_LINES = 400  # at most, in any module of src/
CLASS_LINES = 300  # at most, in any class of src/ (its decorators included)
TYPE_IGNORES = 3  # at most, in all of src/
SUBPACKAGES = {path.parent.name for path in PACKAGE.glob("*/__init__.py")}


def folder_of(module: str) -> str:
    """The node a module is in the graph of folders: its folder of culex (culex.jobs for
    culex.jobs.job), or itself when it lies flat (culex.config; culex, the facade)."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 and parts[1] in SUBPACKAGES else module


def between_folders(edges: Iterable[Import]) -> list[Import]:
    """The imports that cross from one folder (or flat module) to another, as edges between
    folders."""
    found = []
    for edge in edges:
        source, target = folder_of(edge.source), folder_of(edge.target)
        if source != target:
            found.append(Import(source, target, edge.when, edge.line))
    return found


def test_the_folder_graph_is_read_from_every_import() -> None:
    assert {"_redis", "cli", "dashboard", "jobs", "operations", "runner", "server"} <= SUBPACKAGES
    assert folder_of("culex.jobs.job") == folder_of("culex.jobs") == "culex.jobs"
    assert folder_of("culex.config") == "culex.config"  # (from .. import config, in a folder)
    assert folder_of("culex") == "culex"  # the facade: the top, a node of its own
    found = between_folders(
        [
            Import("culex.jobs.job", "culex.jobs.task", "top", 1),  # inside one folder
            Import("culex.jobs.enqueue", "culex.tracing", "top", 2),
            Import("culex.tracing", "culex.runner.attempt", "typing", 3),  # types count
            Import("culex.runner.attempt", "culex.jobs.job", "deferred", 4),
        ]
    )
    assert [(edge.source, edge.target) for edge in found] == [
        ("culex.jobs", "culex.tracing"),
        ("culex.tracing", "culex.runner"),
        ("culex.runner", "culex.jobs"),
    ]
    assert find_cycle(found) == ["culex.jobs", "culex.tracing", "culex.runner", "culex.jobs"]
    into_the_facade = [
        Import("culex", "culex.operations.stats", "top", 1),
        Import("culex.operations.stats", "culex", "deferred", 2),  # import culex, inside
    ]
    assert find_cycle(between_folders(into_the_facade)) == [
        "culex",
        "culex.operations",
        "culex",
    ]


def test_no_import_circle_between_folders() -> None:
    """The folders of culex (and each flat module) import each other in one direction only,
    type-only imports included: a reader who follows an import never comes back to the
    folder they started from. The facade (culex/__init__.py) is the top: it may import
    anything, and a module it brings in never imports it."""
    edges = imports()
    cycle = find_cycle(between_folders(edges)) or []
    steps = set(pairwise(cycle))
    closing = [
        f"{edge.source}:{edge.line} imports {edge.target} ({edge.when})"
        for edge in edges
        if (folder_of(edge.source), folder_of(edge.target)) in steps
    ]
    assert cycle == [], "\n".join([" -> ".join(cycle), *closing])


def test_the_runner_and_the_operations_stand_apart() -> None:
    """What people use to see and steer a queue (operations/) and what runs its tasks
    (runner/) share only the bands below them: a runner loads no dashboard reads, and a
    scrape or a CLI listing loads no runner."""
    crossing = [
        f"{edge.source}:{edge.line} imports {edge.target}"
        for edge in imports()
        if {folder_of(edge.source), folder_of(edge.target)} == {"culex.operations", "culex.runner"}
    ]
    assert crossing == []


def flat_modules(package: Path) -> list[str]:
    """The modules that lie flat in ``package`` beyond the list (FLAT)."""
    return sorted(path.stem for path in package.glob("*.py") if path.stem not in FLAT)


def test_nothing_lies_flat_beyond_the_list() -> None:
    assert flat_modules(PACKAGE) == []


def test_the_flat_check_finds_a_flat_module(tmp_path: Path) -> None:
    for name in ("__init__.py", "config.py", "helpers.py", "py.typed"):
        (tmp_path / name).write_text("")
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "job.py").write_text("")
    assert flat_modules(tmp_path) == ["helpers"]


def oversized(root: Path) -> list[str]:
    """Each module of ``root`` over MODULE_LINES lines and each class over CLASS_LINES, as
    ``path: N lines`` and ``path:line Class: N lines``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text()
        where = path.relative_to(root).as_posix()
        if (lines := len(text.splitlines())) > MODULE_LINES:
            found.append(f"{where}: {lines} lines")
        for node in ast.walk(ast.parse(text, str(path))):
            if isinstance(node, ast.ClassDef):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                if (lines := (node.end_lineno or node.lineno) - first + 1) > CLASS_LINES:
                    found.append(f"{where}:{first} {node.name}: {lines} lines")
    return found


def test_no_module_or_class_too_long_to_read() -> None:
    found = oversized(ROOT / "src")
    assert found == [], "\n".join(found)


def test_the_size_check_finds_what_is_too_long(tmp_path: Path) -> None:
    body = "".join(f"    x{n} = {n}\n" for n in range(CLASS_LINES - 1))
    (tmp_path / "fits.py").write_text(f"class Fits:\n{body}")  # CLASS_LINES lines
    (tmp_path / "rooms.py").write_text(f"@dataclass\nclass Big:\n{body}\n" + "#\n" * 99)
    assert len((tmp_path / "rooms.py").read_text().splitlines()) == MODULE_LINES + 1
    assert oversized(tmp_path) == [
        "rooms.py: 401 lines",
        "rooms.py:1 Big: 301 lines",
    ]


def type_ignores(root: Path) -> list[str]:
    """Each ``type: ignore`` comment in the modules of ``root``, as ``path:line``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        tokens = tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
        found += [
            f"{path.relative_to(root).as_posix()}:{token.start[0]}"
            for token in tokens
            if token.type == tokenize.COMMENT and re.search(r"\btype:\s*ignore\b", token.string)
        ]
    return found


def test_few_type_ignores() -> None:
    found = type_ignores(ROOT / "src")
    assert len(found) <= TYPE_IGNORES, found


def test_the_type_ignore_count_finds_the_comments(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(
        "x = f()  # type: ignore[arg-type]\n"
        'y = "# type: ignore"  # a string is not a comment\n'
        "z = g()  # (a note)  # type:ignore\n"
    )
    assert type_ignores(tmp_path) == ["a.py:1", "a.py:3"]


def untested_subpackages(package: Path, tests: Path) -> list[str]:
    """Each folder of ``package`` with no folder of tests of the same name (``tests/NAME/``
    holding a test module)."""
    return sorted(
        path.parent.name
        for path in package.glob("*/__init__.py")
        if not any((tests / path.parent.name).glob("test_*.py"))
    )


def test_the_tests_mirror_the_package() -> None:
    assert untested_subpackages(PACKAGE, ROOT / "tests") == []


def test_the_mirror_check_finds_a_folder_without_tests(tmp_path: Path) -> None:
    for folder in ("src/pkg/jobs", "src/pkg/cli", "src/pkg/lua", "tests/jobs", "tests/cli"):
        (tmp_path / folder).mkdir(parents=True)
    for name in ("src/pkg/jobs", "src/pkg/cli"):
        (tmp_path / name / "__init__.py").write_text("")
    (tmp_path / "tests/jobs/test_job.py").write_text("")
    (tmp_path / "tests/cli/__init__.py").write_text("")  # a folder, but no test in it
    assert untested_subpackages(tmp_path / "src/pkg", tmp_path / "tests") == ["cli"]


# -- every pointer stays inside the repository ----------------------------------------------

# What a comment or a page may not cite: a page in capitals other than the README (the
# team's own notes are kept outside the repository), a folder beside it, and a nameless
# ancestor. Point into docs/ instead (docs/design.md#<section>, docs/architecture.md), or
# name the system ("Mosquito's", "hworker's rule").
OUTSIDE = re.compile(
    r"\b(?!README\.md|CHANGELOG\.md)[A-Z][A-Z_]*\.md\b|\.\./shared|(?i:\bthe\s+seed|\bseed \d{3}\b)"
)
POINTED_FROM = ("src", "tests", "docs", "bench")
TEXT_SUFFIXES = {".py", ".md", ".lua", ".html", ".js", ".css", ".json", ".toml", ".txt"}

# A file named in a comment (Python, Lua) or a page: a name ending in .py, .md or .lua, with
# or without its folders.
FILE_NAMED = re.compile(r"(?<![\w./-])((?:[\w.-]+/)*[\w-]+\.(?:py|md|lua))\b(?![\w/-])")
URL = re.compile(r"https?://\S+")
ANCHOR = re.compile(r"#([\w-]+)")  # a section of a page: docs/design.md#the-server
# Files that are not this repository's, each with why it is named (fnmatch patterns).
NOT_OURS = {
    "guide.py": "the reader's own script, that docs/guide.md builds up section by section",
    "test_jobs.py": "the reader's own test file in docs/testing.md",
    "manage.py": "Django's, in the reader's project of docs/django.md",
    "settings.py": "Django's, in the reader's project of docs/django.md",
    "mysite/*.py": "the reader's Django project of docs/django.md",
    "shop/*.py": "the reader's Django app of docs/django.md",
    "tests/test_orders.py": "the reader's test in docs/django.md",
    "photos/*.py": "the reader's Flask app of docs/flask.md",
    "app/*.py": "the reader's FastAPI app of docs/fastapi.md",
    "tests/test_signup.py": "the reader's test in docs/fastapi.md",
    "include/NAME.lua": "a pattern for any include file (culex/_redis/assembly.py)",
}


def pointing_files(root: Path) -> list[Path]:
    found = [root / "README.md"]
    for folder in POINTED_FROM:
        found += [
            path
            for path in sorted((root / folder).rglob("*"))
            if path.suffix in TEXT_SUFFIXES
            and "__pycache__" not in path.parts
            and not any(part.startswith(".") for part in path.relative_to(root).parts)
        ]
    return found


def outside_pointers(root: Path, files: Iterable[Path]) -> list[str]:
    """Each line that cites something outside the repository, as ``path:line: text``; a
    phrase may go on to the next line's first word ("the" at a line's end, "seed" next)."""
    found = []
    for path in files:
        lines = path.read_text().splitlines()
        for number, line in enumerate(lines, 1):
            after = lines[number].split()[:1] if number < len(lines) else []
            if match := OUTSIDE.search(" ".join([line, *after])):
                found.append(f"{path.relative_to(root)}:{number}: {match.group()}")
    return sorted(found)


def commentary(path: Path) -> list[tuple[int, str]]:
    """The text of a file that speaks to a reader, by line: a Python file's comments and
    docstrings, a Lua file's comments, all of a page."""
    text = path.read_text()
    if path.suffix == ".py":
        spoken = [
            (token.start[0], token.string)
            for token in tokenize.generate_tokens(io.StringIO(text).readline)
            if token.type == tokenize.COMMENT
        ]
        for node in ast.walk(ast.parse(text, str(path))):
            documented = ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef
            if isinstance(node, documented) and (doc := ast.get_docstring(node, clean=False)):
                first = node.body[0].lineno
                spoken += [(first + n, line) for n, line in enumerate(doc.splitlines())]
        return spoken
    lines = enumerate(text.splitlines(), 1)
    if path.suffix == ".lua":
        return [(number, line.partition("--")[2]) for number, line in lines if "--" in line]
    return list(lines) if path.suffix == ".md" else []


def missing_files(root: Path, files: Iterable[Path]) -> list[str]:
    """Each file a comment or a page names that is not in the repository, as
    ``path:line: name``. A name must end a path in the repository (or be one from the naming
    file's folder), and a page's section named after it (``#anchor``) must be a heading."""
    known = {path.relative_to(root).as_posix() for path in pointing_files(root)}
    known |= {path.name for path in root.iterdir() if path.is_file()}
    found = []
    for path in files:
        for number, text in commentary(path):
            text = URL.sub(" ", text)
            for match in FILE_NAMED.finditer(text):
                name = match.group(1)
                if any(fnmatch.fnmatchcase(name, pattern) for pattern in NOT_OURS):
                    continue
                there = [root / k for k in known if k == name or k.endswith("/" + name)]
                there += [path.parent / name] if (path.parent / name).is_file() else []
                section = ANCHOR.match(text, match.end())
                if not there:
                    found.append(f"{path.relative_to(root)}:{number}: {name}")
                elif section and not any(section[1] in headings(page) for page in there):
                    found.append(f"{path.relative_to(root)}:{number}: {name}{section[0]}")
    return sorted(found)


def headings(page: Path) -> set[str]:
    """The anchors of a page's headings, as a Markdown renderer makes them (GitHub's rule)."""
    titles = re.findall(r"^#+ (.*)$", page.read_text(), flags=re.M)
    return {re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-") for title in titles}


def test_nothing_points_outside_the_repository() -> None:
    here = Path(__file__).resolve()
    assert outside_pointers(ROOT, [p for p in pointing_files(ROOT) if p != here]) == []


def test_every_file_a_comment_or_a_page_names_exists() -> None:
    assert missing_files(ROOT, pointing_files(ROOT)) == []


def test_the_pointer_checks_find_what_they_look_for(tmp_path: Path) -> None:
    for folder in POINTED_FROM:
        (tmp_path / folder / "x").mkdir(parents=True)
    (tmp_path / "README.md").write_text("See docs/wire-format.md and design.md.\n")
    (tmp_path / "docs" / "design.md").write_text("# The server\n\nAs in the\nseed.\n")
    (tmp_path / "src" / "x" / "drivers.py").write_text(
        '"""The drivers (not client.py: x/drivers.py)."""\n'
        "# RULES.md says so; docs/design.md#the-server and docs/design.md#a-client do not\n"
        'NAME = "nowhere.py"  # a name in code is not a pointer\n'
    )
    (tmp_path / "src" / "x" / "claim.lua").write_text(
        "-- see lua/include/wake.lua and claim.lua\nreturn 'gone.lua'\n"
    )
    files = pointing_files(tmp_path)
    assert outside_pointers(tmp_path, files) == [
        "docs/design.md:3: the seed",
        "src/x/drivers.py:2: RULES.md",
    ]
    assert missing_files(tmp_path, files) == [
        "README.md:1: docs/wire-format.md",
        "src/x/claim.lua:1: lua/include/wake.lua",
        "src/x/drivers.py:1: client.py",
        "src/x/drivers.py:2: RULES.md",
        "src/x/drivers.py:2: docs/design.md#a-client",
    ]
