"""The runner's side of culex: the Runner and the loops it starts (see runner.py)."""

from .runner import Runner

__all__ = ["Runner"]
