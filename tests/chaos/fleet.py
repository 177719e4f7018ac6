"""Runner processes for the chaos suite: started as users start them, and abused.

Each runner is ``python -m culex run <chaos_jobs.py>`` with its own log file. Every fault
the fleet inflicts (SIGKILL, SIGTERM, SIGSTOP, SIGCONT) or notices (a runner that died on
its own) goes into the ledger with its time: a death or a stop once it has taken effect,
so that everything the process logged happened before it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..conftest import wait_until
from . import chaos_jobs
from .ledger import CONT, DIED, KILL, STOP, TERM, Ledger

JOBS_FILE = Path(chaos_jobs.__file__).resolve()


@dataclass
class RunnerProcess:
    proc: subprocess.Popen[bytes]
    log: Path
    stopped: bool = False  # SIGSTOP'd and not yet continued
    accounted: bool = False  # its end was caused by the test, or already recorded

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


@dataclass
class Fleet:
    """A set of runner processes on one server; ``close`` kills whatever is left."""

    ledger: Ledger
    redis_url: str
    workdir: Path
    concurrency: int = 8
    queues: list[str] | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    log_level: str = "INFO"
    runners: list[RunnerProcess] = field(default_factory=list)  # every one ever started

    def start(self) -> RunnerProcess:
        self.workdir.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            "CULEX_REDIS_URL": self.redis_url,
            # Keep finished tasks' hashes, so the check can read every final state.
            "CULEX_SUCCESSFUL_JOB_TTL": "3600",
            chaos_jobs.LOG_DIR_ENV: str(self.ledger.exec_dir),
            **self.env,
        }
        # -X faulthandler: a hung runner's threads can be dumped into its log (SIGABRT).
        command = [sys.executable, "-X", "faulthandler", "-m", "culex"]
        command += ["--log-level", self.log_level, "run"]
        command += [str(JOBS_FILE), "--concurrency", str(self.concurrency)]
        if self.queues:
            command += ["--queues", ",".join(self.queues)]
        log = self.workdir / f"runner-{len(self.runners)}.log"
        with open(log, "wb") as stderr:
            proc = subprocess.Popen(
                command,
                cwd=self.workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=stderr,
                stderr=stderr,
            )
        runner = RunnerProcess(proc, log)
        self.runners.append(runner)
        return runner

    @property
    def alive(self) -> list[RunnerProcess]:
        return [r for r in self.runners if r.alive()]

    def kill(self, runner: RunnerProcess) -> None:
        """SIGKILL: the runner dies with its tasks in hand."""
        runner.accounted = True
        runner.proc.kill()
        runner.proc.wait()
        self.ledger.fault(KILL, runner.pid)

    def terminate(self, runner: RunnerProcess) -> None:
        """SIGTERM: a graceful stop (does not wait for the exit)."""
        self.ledger.fault(TERM, runner.pid)
        runner.accounted = True
        runner.proc.send_signal(signal.SIGTERM)

    def pause(self, runner: RunnerProcess) -> None:
        """SIGSTOP, recorded once the process is really stopped."""
        runner.proc.send_signal(signal.SIGSTOP)
        wait_until(lambda: _state(runner.pid) in ("T", "t"), what="SIGSTOP", every=0.001)
        self.ledger.fault(STOP, runner.pid)
        runner.stopped = True

    def resume(self, runner: RunnerProcess) -> None:
        self.ledger.fault(CONT, runner.pid)
        runner.proc.send_signal(signal.SIGCONT)
        runner.stopped = False

    def dump(self, runner: RunnerProcess) -> str:
        """Abort a hung runner; its log then ends with its asyncio tasks and threads."""
        runner.accounted = True
        runner.proc.send_signal(signal.SIGUSR1)  # chaos_jobs prints its asyncio tasks
        time.sleep(0.5)
        runner.proc.send_signal(signal.SIGABRT)
        runner.proc.wait()
        return runner.log_text()[-6000:]

    def replace_dead(self) -> list[RunnerProcess]:
        """Record runners that died on their own and start one in place of each."""
        died = [r for r in self.runners if not r.accounted and not r.alive()]
        for runner in died:
            self.ledger.fault(DIED, runner.pid)
            runner.accounted = True
            self.start()
        return died

    def logs(self) -> str:
        return "\n".join(r.log_text() for r in self.runners)

    def close(self) -> None:
        for runner in self.runners:
            if runner.alive():
                runner.proc.kill()
            runner.proc.wait()


def _state(pid: int) -> str:
    """The process state letter of /proc/<pid>/stat (R, S, T for stopped, Z, ...)."""
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rpartition(")")[2].split()[0]
