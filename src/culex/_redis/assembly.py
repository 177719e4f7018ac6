"""How the shipped scripts carry the Lua they share: copies of ``lua/include/`` files.

Each script under ``lua/`` is complete by itself
(docs/design.md#the-files-are-the-protocol), so a foreign client sends the file as it is.
Lua that several scripts share is written once under
``lua/include/`` and copied into each of them between two marker lines::

    -- >>> include/dead.lua
    ...the include file, after its opening comment paragraph...
    -- <<< include/dead.lua

After editing an include file, refresh the copies with ``python -m culex._redis.assembly``;
``--check`` only lists the scripts whose copies differ (the test suite fails on any).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

FOLDER = Path(__file__).parent / "lua"

# A copy of an include file: `-- >>> include/NAME.lua`, its body, `-- <<< include/NAME.lua`.
_COPY = re.compile(r"^-- >>> (include/[\w-]+\.lua)\n.*?^-- <<< \1\n", re.MULTILINE | re.DOTALL)


def assembled(text: str, folder: Path) -> str:
    """``text`` with each copy of an include file replaced by that file's body as it is now
    (the file after its opening comment paragraph, which speaks of the file itself)."""

    def copy(match: re.Match[str]) -> str:
        name = match.group(1)
        source = (folder / name).read_text("utf-8")
        body = source.split("\n\n", 1)[1] if "\n\n" in source else source
        return f"-- >>> {name}\n{body.rstrip()}\n-- <<< {name}\n"

    return _COPY.sub(copy, text)


def stale(folder: Path) -> list[Path]:
    """The scripts in ``folder`` whose copies of include files differ from their sources."""
    return [
        path
        for path in sorted(folder.glob("*.lua"))
        if assembled(path.read_text("utf-8"), folder) != path.read_text("utf-8")
    ]


def main(argv: list[str]) -> int:
    """Refresh the copies in the package's scripts; with ``--check``, only list the stale."""
    folder = FOLDER
    paths = stale(folder)
    for path in paths:
        if "--check" in argv:
            print(f"{path.name}: a copy of an include file differs from its source")
        else:
            path.write_text(assembled(path.read_text("utf-8"), folder), "utf-8")
            print(f"{path.name}: copies refreshed")
    return 1 if paths and "--check" in argv else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
