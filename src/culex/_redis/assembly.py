"""How the shipped scripts carry the Lua they share: copies of ``lua/include/`` files.

Each script under ``lua/`` is complete by itself
(docs/design.md#the-files-are-the-protocol), so a foreign client sends the file as it is.
Lua that several scripts share is written once under
``lua/include/`` and copied into each of them between two marker lines::

    -- >>> include/dead.lua
    ...the include file, after its opening comment paragraph...
    -- <<< include/dead.lua

A copy leaves out the include's functions that its script never calls (directly or
through another function it keeps), and says which: a server runs a script's whole text
on every call, and each ``local function`` there makes a closure that the garbage collector
then collects (about a thousand instructions a function on Valkey 8, 3 % of a one-call
enqueue's script for the four that ``enqueue.lua`` does not call).

After editing an include file, refresh the copies with ``python -m culex._redis.assembly``;
``--check`` only lists the scripts whose copies differ (the test suite fails on any).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import NamedTuple

FOLDER = Path(__file__).parent / "lua"

# A copy of an include file: `-- >>> include/NAME.lua`, its body, `-- <<< include/NAME.lua`.
_COPY = re.compile(r"^-- >>> (include/[\w-]+\.lua)\n.*?^-- <<< \1\n", re.MULTILINE | re.DOTALL)
_COPY_NAME = re.compile(r"^-- >>> (include/[\w-]+\.lua)$", re.MULTILINE)
# A function of an include file: `local function NAME(` at the line's start, to `end` alone.
_FUNCTION = re.compile(r"local function (\w+)\(")


def assembled(text: str, folder: Path) -> str:
    """``text`` with each copy of an include file replaced by that file's body as it is now
    (the file after its opening comment paragraph, which speaks of the file itself), less
    the functions ``text`` never calls."""
    bodies = {name: _body(folder / name) for name in _COPY_NAME.findall(text)}
    kept = _called(_COPY.sub("", text), [c for body in bodies.values() for c in body])

    def copy(match: re.Match[str]) -> str:
        name = match.group(1)
        chunks = bodies[name]
        left_out = [c.function for c in chunks if c.function and c.function not in kept]
        lines = [c.text for c in chunks if not c.function or c.function in kept]
        if left_out:
            lines.append(f"\n-- (left out here, not called by this script: {', '.join(left_out)})")
        kept_text = re.sub(r"\n{3,}", "\n\n", "".join(lines)).strip("\n")
        return f"-- >>> {name}\n{kept_text}\n-- <<< {name}\n"

    return _COPY.sub(copy, text)


class _Chunk(NamedTuple):
    """A piece of an include file's body: a function (its name, and its text with the
    comment lines right above it), or the lines between functions (``function`` "")."""

    function: str
    text: str


def _body(path: Path) -> list[_Chunk]:
    """The body of the include file at ``path``, cut into its functions and what lies
    between them."""
    source = path.read_text("utf-8")
    body = source.split("\n\n", 1)[1] if "\n\n" in source else source
    chunks: list[_Chunk] = []
    lines = (body.rstrip() + "\n").splitlines(keepends=True)
    between: list[str] = []
    i = 0
    while i < len(lines):
        started = _FUNCTION.match(lines[i])
        if not started:
            between.append(lines[i])
            i += 1
            continue
        # (the comment lines right above belong to the function, but for the file's lead)
        comment = len(between)
        while comment > 0 and between[comment - 1].startswith("--"):
            comment -= 1
        if comment == 0 and not chunks:
            comment = len(between)
        end = next(j for j in range(i, len(lines)) if lines[j].rstrip() == "end")
        if between[:comment]:
            chunks.append(_Chunk("", "".join(between[:comment])))
        chunks.append(_Chunk(started.group(1), "".join(between[comment:] + lines[i : end + 1])))
        between = []
        i = end + 1
    if between:
        chunks.append(_Chunk("", "".join(between)))
    return chunks


def _called(own: str, chunks: list[_Chunk]) -> set[str]:
    """The functions among ``chunks`` that the script's own text ``own`` calls, or that a
    function it calls does, and so on."""
    kept: set[str] = set()
    reached = own + "".join(c.text for c in chunks if not c.function)
    while True:
        more = {
            c.function
            for c in chunks
            if c.function and c.function not in kept
            and re.search(rf"\b{c.function}\b", reached)
        }  # fmt: skip
        if not more:
            return kept
        kept |= more
        reached += "".join(c.text for c in chunks if c.function in more)


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
