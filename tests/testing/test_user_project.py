"""A user's own project, tested with culex's fixture and drain, in a fresh venv.

The venv gets culex built from this checkout (and pytest, pytest-xdist): nothing of this
suite. Its tests find ``culex_server`` through culex's pytest11 entry point alone: the
project has no conftest.py. One venv serves the session; making it costs about 20 s.
"""

from __future__ import annotations

import os
import subprocess
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

JOBS = """
import culex


class GreetJob(culex.QueuedJob):
    name: str

    def perform(self) -> str:
        return f"hello {self.name}"


class SignupJob(culex.QueuedJob):
    email: str

    def perform(self) -> None:
        GreetJob(name=self.email.split("@")[0]).enqueue(delay=3600)


class BrokenJob(culex.QueuedJob):
    def perform(self) -> None:
        raise RuntimeError("deliberately broken")
"""

TESTS = '''
import os
from pathlib import Path

import pytest

from culex.testing import drain, enqueued
from jobs import BrokenJob, GreetJob, SignupJob


def record(server):
    """Which server this process's tests ran on (one line per test)."""
    folder = Path(os.environ["SEEN_DIR"])
    with open(folder / str(os.getpid()), "a") as seen:
        seen.write(server.url + "\\n")


@pytest.mark.parametrize("who", ["ada", "bob", "cy", "di"])
def test_a_signup_greets(culex_server, who):
    record(culex_server)
    SignupJob(email=f"{who}@example.com").enqueue()
    assert len(enqueued(SignupJob, email=f"{who}@example.com")) == 1
    ran = drain()
    assert [r.result for r in ran if r.job == "GreetJob"] == [f"hello {who}"]
    assert enqueued(GreetJob) == []


def test_a_broken_job(culex_server):
    record(culex_server)
    if os.environ.get("BREAK"):
        BrokenJob().enqueue()
    drain()
'''


@pytest.fixture(scope="session")
def user_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with culex (built from this checkout), pytest and pytest-xdist."""
    folder = tmp_path_factory.mktemp("user-venv")
    venv.create(folder, with_pip=True)
    python = folder / "bin" / "python"
    install = subprocess.run(
        [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         str(ROOT), "pytest", "pytest-xdist"],
        capture_output=True, text=True, timeout=540, check=False,
    )  # fmt: skip
    assert install.returncode == 0, install.stdout + install.stderr
    return python


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "jobs.py").write_text(JOBS)
    (tmp_path / "test_jobs.py").write_text(TESTS)
    (tmp_path / "seen").mkdir()
    return tmp_path


def run_pytest(python: Path, project: Path, *args: str, **env: str) -> tuple[int, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("CULEX_", "PYTHON"))}
    # A server of the user's own in the environment: the fixture must not talk to it.
    clean |= {"CULEX_REDIS_URL": "redis://127.0.0.1:1", "SEEN_DIR": str(project / "seen")}
    done = subprocess.run(
        [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=project, env=clean | env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    return done.returncode, done.stdout + done.stderr


def servers_seen(project: Path) -> dict[str, set[str]]:
    return {path.name: set(path.read_text().split()) for path in (project / "seen").iterdir()}


@pytest.mark.timeout(900)
def test_a_users_project_runs_its_tests_on_the_fixture(user_python: Path, project: Path) -> None:
    code, out = run_pytest(user_python, project)
    assert code == 0, out
    assert "5 passed" in out
    [urls] = servers_seen(project).values()
    [url] = urls  # one server for the session
    assert url.startswith("unix://") and str(project) not in url
    assert not (project / ".culex").exists()  # never the default data folder

    code, out = run_pytest(user_python, project, BREAK="1")
    assert code == 1, out
    assert "RuntimeError: deliberately broken" in out
    assert "1 failed, 4 passed" in out


@pytest.mark.timeout(900)
def test_each_xdist_worker_has_a_server_of_its_own(user_python: Path, project: Path) -> None:
    code, out = run_pytest(user_python, project, "-n", "2")
    assert code == 0, out
    seen = servers_seen(project)
    assert len(seen) == 2, seen  # two worker processes ran tests
    for urls in seen.values():
        assert len(urls) == 1  # one server per worker
    first, second = seen.values()
    assert first != second
