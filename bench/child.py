"""A Python child process run with some environment's interpreter, and its JSON answer.

The harness runs in culex's environment, but the peers live in their own (``peers.py``):
whatever must run with a system's interpreter (its producer, an adapter's constants, the
versions installed) runs as a child whose last line of stdout is one JSON object.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent  # bench/: the children's working directory


def run(
    python: str | Path,
    args: list[str],
    *,
    what: str,
    env: dict[str, str] | None = None,
    timeout: float = 600,
) -> dict[str, Any]:
    """Run ``python args...`` in bench/ and return the JSON object on its last line.

    Raises RuntimeError naming ``what`` with the end of the child's stderr if it fails.
    """
    out = subprocess.run(
        [str(python), *args],
        env=env,
        cwd=HERE,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    lines = out.stdout.strip().splitlines()
    if out.returncode != 0 or not lines:
        tail = out.stderr.strip().splitlines()[-3:]
        raise RuntimeError(f"{what} failed: {' | '.join(tail)}")
    return dict(json.loads(lines[-1]))


def answer(result: dict[str, Any]) -> None:
    """The child's side: print ``result`` as the last line of stdout."""
    print(json.dumps(result), flush=True)
