"""The threads that run sync performs, counting the calls they run now (a runner that owns
its process ends it rather than wait for a thread still running one: culex.runner.stopping).
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any


class Pool(ThreadPoolExecutor):
    """The threads of sync performs, counting the calls they run now."""

    def __init__(self, workers: int) -> None:
        super().__init__(workers, thread_name_prefix="culex")
        # One item per call running: a deque's append and pop are atomic, so no lock.
        self._calls: deque[None] = deque()

    @property
    def busy(self) -> int:
        return len(self._calls)

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        return super().submit(self._counted, fn, *args, **kwargs)

    def _counted(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        self._calls.append(None)
        try:
            return fn(*args, **kwargs)
        finally:
            self._calls.pop()
