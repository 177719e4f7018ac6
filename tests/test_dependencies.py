"""The dependencies' floors in pyproject.toml are the versions the oldest-versions runs test.

``.ci/run`` installs culex with ``.ci/oldest.txt`` as pip constraints and runs part of the
suite on them (tests/suites.py): a floor raised or lowered in one file and not the other
would test versions that pyproject does not name.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent


def requirements() -> list[Requirement]:
    """Every requirement of culex, its extras' included."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    named = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        named.extend(extra)
    return [Requirement(text) for text in named]


def pins() -> dict[str, Version]:
    found: dict[str, Version] = {}
    for line in (ROOT / ".ci" / "oldest.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f".ci/oldest.txt: {line!r} pins no version"
            found[canonicalize_name(name)] = Version(version)
    return found


def floor(requirement: Requirement) -> Version:
    lower = [spec for spec in requirement.specifier if spec.operator == ">="]
    assert len(lower) == 1, f"{requirement}: one floor (>=) is what the oldest run tests"
    return Version(lower[0].version)


def test_every_floor_is_pinned_in_the_oldest_constraints() -> None:
    pinned = pins()
    for requirement in requirements():
        name = canonicalize_name(requirement.name)
        assert name in pinned, f"{requirement}: not in .ci/oldest.txt"
        assert pinned[name] == floor(requirement), (
            f"{requirement}: .ci/oldest.txt pins {pinned[name]}"
        )


def test_every_pin_is_a_floor_of_pyproject() -> None:
    named = {canonicalize_name(requirement.name) for requirement in requirements()}
    assert sorted(set(pins()) - named) == []
