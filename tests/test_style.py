"""The package and its tests stay mypy --strict and ruff clean (STYLE.md): CI fails otherwise."""

from __future__ import annotations

import subprocess
import sys
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
