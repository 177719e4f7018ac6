"""The guides run as a reader runs them (docs/fastapi.md, django.md, flask.md, testing.md,
guide.md): each page's files are written into an empty folder and its commands run there,
in order, in the fresh virtual environment the page's first command makes.

A page marks what a reader copies with HTML comments, which a rendered page does not show:
``<!-- file: PATH -->`` before a block (the file it is; blocks naming one file make it in
order), ``<!-- run -->`` before a block of commands run one by one, each of which must
succeed, and ``<!-- start -->`` before a command a reader leaves running in a terminal of
its own (a web server, ``culex run``): started in the background and stopped with Ctrl-C's
SIGINT once the test is done with it. Files and commands come in the page's order.

The commands run as written, in bash, with the page's virtual environment active, and with
two differences only: a ``pip install`` that names culex is preceded by what each page's
note on installing says to do from a clone (``pip install /path/to/culex``: here a wheel
built from this checkout once per session), after which the page's own ``pip install culex``
finds culex installed; and a web server listens on a free port (set
by its own variable, ``UVICORN_PORT`` or ``FLASK_RUN_PORT``; Django's ``runserver`` has
none and is given it as its argument). No culex setting comes from the suite: the web side
and the runner meet on culex's embedded server in the project's folder, as a reader's do.

Making a venv and installing into it takes most of the time: the five pages took 60 to 70 s
here, on 2 cores, with pip's cache warm or not. These tests use no server of the suite's, so
the run of the suite on redis-server (tests/suites.py) skips them.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shlex
import signal
import socket
import sqlite3
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from .conftest import wait_until

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"

pytestmark = [
    pytest.mark.timeout(600),
    pytest.mark.skipif(
        os.environ.get("CULEX_TEST_SERVER") == "redis-server",
        reason="the guides run on culex's embedded server, as a reader's do, not the suite's",
    ),
]


@dataclass
class Page:
    """A page's steps in its order: ("file", path, text), ("run" | "start", command, "")."""

    steps: list[tuple[str, str, str]] = field(default_factory=list)

    def commands(self) -> list[str]:
        return [command for kind, command, _ in self.steps if kind != "file"]


MARKED = re.compile(
    r"^<!-- (file: (?P<path>\S+)|run|start) -->\n```\w*\n(?P<body>.*?)^```", re.S | re.M
)


def read_page(name: str) -> Page:
    text = (DOCS / name).read_text()
    page = Page()
    for found in MARKED.finditer(text):
        body = found["body"]
        if found["path"]:
            page.steps.append(("file", found["path"], body))
            continue
        kind = "start" if found.group(1) == "start" else "run"
        for line in body.splitlines():
            if line.strip():
                page.steps.append((kind, line, ""))
    # A code block left unmarked is one the suite never runs: every python block is marked.
    python_blocks = len(re.findall(r"^```python\n", text, flags=re.M))
    marked_python = len(re.findall(r"^<!-- file: \S+ -->\n```python\n", text, flags=re.M))
    assert marked_python == python_blocks, f"{name}: a ```python block with no file marker"
    return page


@pytest.fixture(scope="session")
def culex_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel of culex built from this checkout, once for the session."""
    folder = tmp_path_factory.mktemp("culex-wheel")
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
         "--disable-pip-version-check", "--wheel-dir", str(folder), str(ROOT)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert built.returncode == 0, built.stdout + built.stderr
    [wheel] = folder.glob("culex-*.whl")
    return wheel


def from_checkout(command: str, wheel: Path) -> str:
    """``pip install 'culex[x]' ...`` as the page's note has a reader of a clone run it:
    culex installed from ``wheel`` first, then the command as written; another command as is."""
    words = shlex.split(command.split(" #")[0])
    if words[:2] != ["pip", "install"]:
        return command
    named = [word for word in words if re.fullmatch(r"culex(\[[\w,]+\])?", word)]
    assert len(named) == 1, f"the page's pip install names culex once: {command}"
    return f"pip install {shlex.quote(str(wheel))} && {command}"


class Reader:
    """A reader's terminal in ``folder``: the page's virtual environment active once made."""

    def __init__(self, folder: Path, wheel: Path, port: int) -> None:
        self.folder, self.wheel, self.port = folder, wheel, port
        self.started: list[tuple[str, subprocess.Popen[str]]] = []
        self.ended: dict[str, tuple[int, str]] = {}  # (what stop() found: code, output)
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("CULEX_", "PYTHON", "PYTEST_", "VIRTUAL_ENV", "DJANGO_", "REDIS_"))
        }
        venv = folder / ".venv"
        # python is the suite's own until the page's .venv exists (its first command makes it)
        suite_python = folder.parent / f"{folder.name}-python"
        suite_python.mkdir(exist_ok=True)
        (suite_python / "python").unlink(missing_ok=True)
        (suite_python / "python").symlink_to(sys.executable)
        path = f"{venv / 'bin'}:{suite_python}:{env.get('PATH', '')}"
        self.env = env | {
            "PATH": path,
            "VIRTUAL_ENV": str(venv),
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            "UVICORN_PORT": str(port),
            "FLASK_RUN_PORT": str(port),
        }

    def run(self, command: str) -> str:
        """The command, as a reader types it: it succeeds; its output."""
        done = subprocess.run(
            ["bash", "-c", from_checkout(command, self.wheel)],
            cwd=self.folder, env=self.env, capture_output=True, text=True, timeout=300,
            check=False,
        )  # fmt: skip
        assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
        return done.stdout

    def start(self, command: str) -> None:
        if re.search(r"manage\.py runserver\s*(#.*)?$", command):
            command = command.split(" #")[0] + f" 127.0.0.1:{self.port}"
        process = subprocess.Popen(
            ["bash", "-c", command],
            cwd=self.folder, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, start_new_session=True,
        )  # fmt: skip
        self.started.append((command, process))

    def stop(self) -> dict[str, tuple[int, str]]:
        """Ctrl-C to each started command, last first: its exit code and output."""
        ended = {}
        for command, process in reversed(self.started):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGINT)
            try:
                out, _ = process.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                out, _ = process.communicate()
            ended[command] = (process.returncode, out)
        self.started.clear()
        self.ended |= ended
        return ended


@contextmanager
def follow(page_name: str, folder: Path, wheel: Path) -> Iterator[tuple[Reader, dict[str, str]]]:
    """The page's files written and its commands run, in the page's order (the started ones
    running): the reader
    and what each ``run`` command printed. Afterwards the started commands get Ctrl-C (each
    must end cleanly; what each printed is in ``reader.ended``) and the project's embedded
    server is stopped."""
    page = read_page(page_name)
    assert page.commands()[0] == "python -m venv .venv && . .venv/bin/activate"
    reader = Reader(folder, wheel, free_port())
    printed = {}
    written: set[str] = set()
    with ExitStack() as stack:
        stack.callback(stop_embedded_server, reader)
        for kind, command, text in page.steps:
            if kind == "file":  # (a file the page wrote already grows; another is replaced)
                (folder / command).parent.mkdir(parents=True, exist_ok=True)
                with (folder / command).open("a" if command in written else "w") as file:
                    file.write(text)
                written.add(command)
            elif kind == "run":
                printed[command] = reader.run(command)
            else:
                reader.start(command)
        try:
            yield reader, printed
        finally:
            ended = reader.stop()
        for command, (code, out) in ended.items():
            assert code == 0, f"{command} ended with {code}:\n{out}"


def free_port() -> int:
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        return int(free.getsockname()[1])


def stop_embedded_server(reader: Reader) -> None:
    if (reader.folder / ".culex").exists() and (reader.folder / ".venv/bin/culex").exists():
        reader.run("culex server stop")


def http(
    url: str, method: str = "GET", auth: tuple[str, str] | None = None
) -> tuple[int, dict[str, str], str]:
    """One request: its status, headers and body (an error status is an answer too)."""
    request = urllib.request.Request(url, method=method)
    if auth:
        pair = base64.b64encode(":".join(auth).encode()).decode()
        request.add_header("Authorization", f"Basic {pair}")
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, dict(answer.headers), answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read().decode()


def serving(reader: Reader) -> str:
    """The web side's address, once it answers (a started command that ended: its output)."""
    base = f"http://127.0.0.1:{reader.port}"

    def answers() -> bool:
        for command, process in reader.started:
            if process.poll() is not None:
                out = process.stdout.read() if process.stdout else ""
                raise AssertionError(f"{command} ended with {process.returncode}:\n{out}")
        try:
            http(base)
        except OSError:
            return False
        return True

    wait_until(answers, timeout=60, what="the web side to answer")
    return base


def until_ended(url: str) -> dict[str, str]:
    """GET ``url`` (a task's state, as JSON) until the task is no longer waiting or pending."""
    seen: dict[str, str] = {}

    def ended() -> bool:
        nonlocal seen
        seen = json.loads(http(url)[2])
        return seen.get("state") not in ("waiting", "pending", "scheduled")

    wait_until(ended, timeout=60, what=f"the task at {url} to end")
    return seen


def passed(out: str) -> int:
    found = re.search(r"(\d+) passed", out)
    assert found and " failed" not in out and " skipped" not in out, out
    return int(found.group(1))


def test_the_fastapi_guide_runs(culex_wheel: Path, tmp_path: Path) -> None:
    with follow("fastapi.md", tmp_path, culex_wheel) as (reader, printed):
        assert passed(printed["pytest"]) == 2
        base = serving(reader)
        status, _, body = http(f"{base}/signup?user=ann", "POST")
        assert status == 200, body
        task = json.loads(body)["task"]
        seen = until_ended(f"{base}/signup/{task}")
        assert seen == {"state": "succeeded", "result": "welcome, ann"}
        assert http(f"{base}/signup/no-such-task")[0] == 404
        status, headers, body = http(f"{base}/culex/")
        assert (status, body) == (401, "staff only")
        assert headers["www-authenticate"].startswith("Basic ")  # a browser asks
        assert http(f"{base}/culex/", auth=("staff", "wrong"))[0] == 401
        status, _, page = http(f"{base}/culex/", auth=("staff", "change-me"))
        assert status == 200 and "welcome_job" in page


def test_the_flask_guide_runs(culex_wheel: Path, tmp_path: Path) -> None:
    with follow("flask.md", tmp_path, culex_wheel) as (reader, _):
        base = serving(reader)
        status, _, body = http(f"{base}/photos/cat.png", "POST")
        assert status == 202, body
        task = json.loads(body)["task"]
        # current_app's config reached perform, in the runner's process; the view found the
        # task in thumbnail_job, ThumbnailJob's queue under its abstract base
        seen = until_ended(f"{base}/thumbnails/{task}")
        assert seen == {"state": "succeeded", "result": "cat.png at 128px"}
        assert http(f"{base}/thumbnails/no-such-task")[0] == 404


def test_the_django_guide_runs(culex_wheel: Path, tmp_path: Path) -> None:
    with follow("django.md", tmp_path, culex_wheel) as (reader, printed):
        assert passed(printed["pytest"]) == 2
        base = serving(reader)
        form = urllib.parse.urlencode({"email": "ann@example.com"}).encode()
        with urllib.request.urlopen(f"{base}/orders", data=form, timeout=30) as answer:
            order = json.loads(answer.read())["order"]

        def receipt_sent() -> bool:
            with sqlite3.connect(tmp_path / "db.sqlite3") as db:
                row = db.execute("select receipt_sent from shop_order where id = ?", (order,))
                return bool(row.fetchone()[0])

        wait_until(receipt_sent, timeout=60, what="the runner to send the receipt")
        # the page's settings leave Django nothing to warn of (W042: no DEFAULT_AUTO_FIELD)
        assert "no issues" in reader.run("python manage.py check --fail-level WARNING")
    # Django's LOGGING (its default, run by django.setup() in shop/runner.py) left the
    # runner's own lines as they were: it says it started, and what it ran
    [runner] = [out for command, (_, out) in reader.ended.items() if command.startswith("culex")]
    assert "culex is buzzing..." in runner, runner
    assert "Running task send_receipt_job<" in runner and " succeeded, took " in runner, runner


def test_the_testing_guide_runs(culex_wheel: Path, tmp_path: Path) -> None:
    """The page's tests pass, the async one too, with what the page installs and no more."""
    with follow("testing.md", tmp_path, culex_wheel) as (_, printed):
        [out] = [out for command, out in printed.items() if command.startswith("pytest")]
        assert passed(out) == 6


def test_the_user_guide_runs(culex_wheel: Path, tmp_path: Path) -> None:
    """docs/guide.md: its examples, one script, on the embedded server of a fresh venv."""
    with follow("guide.md", tmp_path, culex_wheel) as (_, printed):
        out = printed["python guide.py"]
        assert "SendEmailJob.to: expected str, got int 42\n" in out
        assert "sent\n7\n" in out
        assert "Decimal('2.10')\n" in out
        assert "nothing to charge\nConnectionError: the bank is down\n" in out
        assert "code sent to +15550100\nexpired\n" in out
        assert "ValueError: no such symbol: 4x after 1 attempt\n" in out
        assert "cancelled: the customer unsubscribed\n" in out
