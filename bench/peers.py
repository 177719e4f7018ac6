"""The peers' own virtual environments: never culex's, never a culex dependency.

One per peer, created on first use in ``bench/.peers/<peer>/`` (ignored by git) from PyPI,
unpinned, so each peer gets its latest release and the redis-py it asks for (arq wants
redis<6, taskiq-redis wants redis>=8: one shared environment would hold an old, broken
pair). What got installed is read back into every results file (the peer's versions, and
its whole ``pip freeze``), and ``compare.py --pin FILE`` installs it again exactly.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import child

HERE = Path(__file__).resolve().parent
ROOT = HERE / ".peers"
# The peer -> the distributions it needs (the first one names its version in the table).
PEERS = {
    "arq": ["arq"],
    # saq imports typing_extensions without declaring it
    "saq": ["saq[redis,hiredis]", "typing_extensions"],
    "rq": ["rq"],
    "dramatiq": ["dramatiq"],
    "huey": ["huey"],
    "taskiq": ["taskiq", "taskiq-redis"],
    "streaq": ["streaq"],
    "celery": ["celery[redis]"],
}
SHARED = ["redis", "hiredis"]
# What versions to report for culex's own environment.
CULEX_REPORTED = ["culex", "redis", "hiredis"]


def python(peer: str) -> Path:
    return ROOT / peer / "bin" / "python"


def ensure(peer: str, *, upgrade: bool = False, pins: list[str] | None = None) -> None:
    """Create the peer's environment if needed and install what it needs into it.

    ``pins``: the exact requirements to install instead (``pinned``), the peer's
    environment as a results file recorded it.
    """
    folder = ROOT / peer
    if not python(peer).exists():
        print(f"creating {folder}", file=sys.stderr, flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
    wanted = pins or PEERS[peer] + SHARED
    # What was asked for last time: a changed list (an extra added) installs again.
    marker = folder / "bench-requirements.txt"
    asked = marker.read_text().split() if marker.exists() else []
    if upgrade or asked != wanted:
        print(f"installing {' '.join(wanted)} into {folder}", file=sys.stderr, flush=True)
        upgrading = ["--upgrade"] if upgrade and not pins else []
        subprocess.run(
            [str(python(peer)), "-m", "pip", "install", "--quiet", *upgrading, *wanted],
            check=True,
        )
        marker.write_text("\n".join(wanted) + "\n")


def pinned(peer: str, record: dict[str, Any]) -> list[str]:
    """The requirements that rebuild ``peer``'s environment as the results ``record`` saw it.

    Its ``pip`` freeze when it has one; else (a record transcribed from an older table)
    the versions it names, with everything else unpinned.
    """
    frozen = (record.get("pip") or {}).get(peer)
    if frozen:
        return [line for line in frozen if "==" in line and not line.startswith("#")]
    found = (record.get("versions") or {}).get(peer) or {}
    return [
        f"{wanted}=={found[distribution(wanted)]}" if distribution(wanted) in found else wanted
        for wanted in PEERS[peer] + SHARED
    ]


def distribution(requirement: str) -> str:
    """``celery[redis]`` -> ``celery``."""
    return requirement.partition("[")[0]


def versions(interpreter: Path | str, names: list[str]) -> dict[str, str]:
    """The installed versions of ``names`` in the environment of ``interpreter``."""
    script = (
        "import json, sys\n"
        "from importlib import metadata\n"
        "found = {}\n"
        "for name in sys.argv[1:]:\n"
        "    try:\n"
        "        found[name] = metadata.version(name)\n"
        "    except metadata.PackageNotFoundError:\n"
        "        pass\n"
        "print(json.dumps(found))\n"
    )
    return child.run(interpreter, ["-c", script, *names], what=f"versions in {interpreter}")


def freeze(interpreter: Path | str) -> list[str]:
    """``pip freeze --all`` of the environment of ``interpreter``: every version in it."""
    out = subprocess.run(
        [str(interpreter), "-m", "pip", "freeze", "--all"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if out.returncode != 0:
        return [f"# pip freeze failed: {out.stderr.strip()[-200:]}"]
    return out.stdout.splitlines()
