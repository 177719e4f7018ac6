"""The supervisor: ``culex run MODULE --processes N`` keeps N runner processes going.

One runner is one process, and a Python process runs Python on one core at a time; N
runners use N cores. The supervisor does no queue work: it starts the runners, restarts
one that dies, and stops them all on SIGTERM/SIGINT.

**How a runner starts.** Each is a new interpreter, ``python -m culex run MODULE`` with the
supervisor's settings flags (rebuilt from the parsed flags, not from argv text), not a fork
of the supervisor. A fork copies a process that already runs threads (the log's flusher,
and whatever the user's module started while it was imported) with their locks in any
state; an exec starts clean, costs one interpreter start per runner, and gives each child
exactly what a plain ``culex run`` gives its process (the freeze of its start-up objects
too). The supervisor imports MODULE once itself before starting any: a module that cannot
be imported, or registers no job, ends the command at once with that error, rather than
in N children restarted forever.

**Signals.** The runners run in a process group of their own, so that a Ctrl-C in a
terminal (sent to the whole foreground group) reaches the supervisor only: a runner that
got the terminal's signal and the supervisor's would take the second as "stop at once".
The first SIGTERM/SIGINT to the supervisor passes one SIGTERM to every runner (a graceful
stop: running tasks have the grace period, then are handed back), waits ``STOP_MARGIN``
longer than the grace period, and SIGKILLs what is left. A second signal passes a second
SIGTERM on (each runner's own "stop at once", which also kills its task processes) and
SIGKILLs what is left after ``HURRY``. The exit code is 0 when every runner stopped
cleanly, else 1. Each runner holds the read end of a pipe whose only writer is the
supervisor: when the supervisor ends, even by SIGKILL, the pipe does, and the runner sends
itself one SIGTERM, so no runner is left behind. (Not the kernel's ``PR_SET_PDEATHSIG``:
Linux only, and it fires when the *thread* that started the child ends, once for each
thread the child is handed to as the process dies: two signals are a stop at once.)

**Quiet.** SIGTSTP (quiet: no new task) and SIGUSR2 (take tasks again) are passed on to
every runner whose handlers are set (it says ``ready`` on its pipe: SIGTSTP's default
action would suspend it); one started while the supervisor is quiet starts quiet.

**Recycling.** With ``--max-tasks-per-process M`` or ``--max-memory-per-process MB``, a
runner that has run M tasks, or whose RSS has passed MB, asks on its pipe to be replaced
(culex.runner.supervised). One runner at a time is replaced: the supervisor sends it
SIGUSR1 (it goes quiet, finishes what it runs, and exits) and at once starts a new runner
in its slot; the next that asked waits until the first has exited, claiming nothing
meanwhile (a runner takes no task past its limit). For a moment N+1 processes run.

**Restarts.** A runner that exits when no stop was asked for is started again: at once
if it ran ``STEADY`` seconds or more, else after a pause that doubles with each such early
exit in a row (``RESTART_DELAY``), so that a runner that dies at start (say, a server it
cannot use) does not spin. A runner that refuses its configuration (say, a server whose
maxmemory-policy may evict keys) exits with ``CONFIG_ERROR`` instead: every runner would
refuse it alike, so the supervisor stops the others and exits with code 2, as a plain
``culex run`` does, rather than restart it forever.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any

from .. import config
from ..server import configured
from . import supervised
from .backoff import Backoff

logger = logging.getLogger("culex.supervisor")

STOP_MARGIN = 10.0  # seconds past the grace period before a stopping runner is killed
HURRY = 2.0  # seconds after a second signal before a runner is killed
STEADY = 10.0  # a runner that ran this long was healthy: it is restarted at once
RESTART_DELAY = (0.5, 30.0)  # the pauses before restarting a runner that exits early
CONFIG_ERROR = 78  # a runner's exit code for a configuration error (sysexits' EX_CONFIG)


class Supervisor:
    """Runs ``command`` (a runner) in ``processes`` child processes until SIGTERM/SIGINT."""

    def __init__(self, command: Sequence[str], processes: int, grace_period: float) -> None:
        self.command = list(command)
        self.processes = processes
        self.grace_period = grace_period
        self.children: dict[int, asyncio.subprocess.Process] = {}  # the running ones, by pid
        self._stopping = asyncio.Event()
        self._signals = 0
        self._clean = True  # no runner has been killed or failed to stop
        self._kill_timer: asyncio.TimerHandle | None = None
        self._lifeline = -1  # the read end of the pipe each runner holds
        self._refused = False  # a runner refused its configuration: exit code 2
        self._quiet = False  # SIGTSTP: every runner is told to take no new task
        self._ready: set[int] = set()  # the runners whose signal handlers are set
        self._asked: list[int] = []  # the runners that asked to be replaced, in turn
        self._retired: dict[int, asyncio.Event] = {}  # set once a runner is told to retire
        self._retiring: int | None = None  # the runner being replaced now
        self._background: set[asyncio.Task[None]] = set()  # pipe readers, retired runners

    def run(self) -> int:
        """Run until stopped; the exit code: 0 if every runner stopped cleanly, else 1;
        2 when a runner refused its configuration."""
        return asyncio.run(self._run())

    async def _run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._on_signal, sig)
        loop.add_signal_handler(signal.SIGTSTP, self._on_quiet, True)
        loop.add_signal_handler(signal.SIGUSR2, self._on_quiet, False)
        logger.info("starting %d runner processes", self.processes)
        self._lifeline, writer = os.pipe()  # (the writer is not inherited: close-on-exec)
        try:
            await asyncio.gather(*(self._keep(slot) for slot in range(1, self.processes + 1)))
            while self._background:  # (retired runners still stopping, the pipes' readers)
                await asyncio.wait(self._background)
        finally:
            os.close(self._lifeline)
            os.close(writer)
            if self._kill_timer is not None:
                self._kill_timer.cancel()
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGTSTP, signal.SIGUSR2):
                loop.remove_signal_handler(sig)
        if self._refused:
            return 2
        if self._clean:
            logger.info("every runner stopped")
        else:
            logger.warning("the runners have stopped, not all of them cleanly")
        return 0 if self._clean else 1

    async def _keep(self, slot: int) -> None:
        """Keep one runner going in ``slot`` until the stop."""
        loop = asyncio.get_running_loop()
        backoff = Backoff(*RESTART_DELAY)
        while not self._stopping.is_set():
            started = loop.time()
            child = await self._start(slot)
            if child is not None:
                ended = await self._wait(child)
                if ended is None:  # retiring: it ends on its own; a new runner takes the slot
                    continue
                code = ended
                self._forget(child.pid)
                if self._stopping.is_set():
                    self._stopped(child.pid, code)
                    return
                if code == CONFIG_ERROR:
                    self._refuse(child.pid)
                    return
            lived = loop.time() - started
            if lived >= STEADY:
                backoff.failures = 0
            delay = backoff.failed() if lived < STEADY else 0.0
            if child is not None:
                logger.warning(
                    "runner %d (%d of %d) %s after %.1f s; starting another in %.1f s",
                    *(child.pid, slot, self.processes, _ending(code), lived, delay),
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), delay)

    async def _start(self, slot: int) -> asyncio.subprocess.Process | None:
        """A new runner in ``slot`` (None if the system refused a process: it is logged)."""
        reports, report = os.pipe()  # (the runner writes, the supervisor reads)
        try:
            child = await asyncio.create_subprocess_exec(
                *self.command,
                f"--supervisor-pipe={self._lifeline}",
                f"--supervisor-report={report}",
                *(["--start-quiet"] if self._quiet else []),
                stdin=subprocess.DEVNULL,
                process_group=0,
                pass_fds=(self._lifeline, report),
            )
        except OSError as exc:  # e.g. EAGAIN: too many processes
            os.close(reports)
            logger.error("cannot start runner %d of %d: %s", slot, self.processes, exc)
            return None
        finally:
            os.close(report)
        self.children[child.pid] = child
        self._retired[child.pid] = asyncio.Event()
        self._in_background(self._read_reports(child.pid, reports))
        if self._stopping.is_set():  # (the stop came while it was being started)
            _send(child, signal.SIGTERM)
        logger.info("runner %d started (%d of %d)", child.pid, slot, self.processes)
        return child

    async def _wait(self, child: asyncio.subprocess.Process) -> int | None:
        """The runner's exit code once it has exited; None once it is told to retire."""
        exited = asyncio.ensure_future(child.wait())
        retired = asyncio.ensure_future(self._retired[child.pid].wait())
        await asyncio.wait((exited, retired), return_when=asyncio.FIRST_COMPLETED)
        retired.cancel()
        if not self._retired[child.pid].is_set():
            return exited.result()
        exited.cancel()
        self._in_background(self._leave(child))
        return None

    async def _leave(self, child: asyncio.subprocess.Process) -> None:
        """Wait for a retiring runner to end, then let the next that asked retire."""
        code = await child.wait()
        if self._stopping.is_set():
            self._stopped(child.pid, code)
        elif code == 0:
            logger.info("runner %d retired", child.pid)
        else:
            logger.warning("runner %d %s while retiring", child.pid, _ending(code))
        self._forget(child.pid)  # (and the next that asked retires)

    def _forget(self, pid: int) -> None:
        del self.children[pid]
        self._ready.discard(pid)
        self._retired.pop(pid, None)
        if pid in self._asked:
            self._asked.remove(pid)
        if self._retiring == pid:
            self._retiring = None
            self._next_retire()

    async def _read_reports(self, pid: int, fd: int) -> None:
        """Read what runner ``pid`` says on its pipe (culex.runner.supervised) until it
        ends: ``ready``, and ``recycle REASON``."""
        async for word, reason in supervised.reports(fd):
            if word == "ready" and pid in self.children:
                self._ready.add(pid)
                if self._quiet:
                    _send(self.children[pid], signal.SIGTSTP)
            elif word == "recycle" and pid in self.children and pid not in self._asked:
                logger.info("runner %d asks to be replaced: %s", pid, reason)
                self._asked.append(pid)
                self._next_retire()

    def _next_retire(self) -> None:
        """Tell the first runner that asked to be replaced to retire, when none is retiring
        now (and the supervisor is neither quiet nor stopping); its slot starts another."""
        if self._retiring is not None or self._quiet or self._stopping.is_set():
            return
        while self._asked:
            pid = self._asked.pop(0)
            if pid in self.children:
                logger.info("recycling runner %d: it finishes its tasks and exits", pid)
                self._retiring = pid
                _send(self.children[pid], signal.SIGUSR1)
                self._retired[pid].set()
                return

    def _on_quiet(self, quiet: bool) -> None:
        """SIGTSTP (quiet) or SIGUSR2 (take tasks again), passed to every ready runner (a
        retiring one stays quiet)."""
        self._quiet = quiet
        logger.info(
            "%s: passing it to the runners (%s)",
            "SIGTSTP: quiet, no new task" if quiet else "SIGUSR2: taking tasks again",
            ", ".join(map(str, self.children)) or "none running",
        )
        for pid, child in list(self.children.items()):
            if pid in self._ready and pid != self._retiring:
                _send(child, signal.SIGTSTP if quiet else signal.SIGUSR2)
        if not quiet:
            self._next_retire()

    def _in_background(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _stopped(self, pid: int, code: int) -> None:
        # A runner killed by the SIGTERM before it set its handlers had taken no task.
        if code in (0, -signal.SIGTERM):
            logger.info("runner %d stopped", pid)
        elif code == CONFIG_ERROR:
            logger.info("runner %d refused its configuration too", pid)
        else:
            self._clean = False
            logger.warning("runner %d %s while stopping", pid, _ending(code))

    def _refuse(self, pid: int) -> None:
        """Runner ``pid`` exited on a configuration error (its message is above, on the
        same stderr): every runner would, so all stop, and the supervisor exits with 2."""
        logger.error(
            "runner %d refused its configuration (see its error above): stopping every "
            "runner; fix the configuration and start culex run again",
            pid,
        )
        self._refused = True
        if not self._stopping.is_set():
            self._stopping.set()
            self._kill_later(self.grace_period + STOP_MARGIN)
        for child in list(self.children.values()):
            _send(child, signal.SIGTERM)

    def _on_signal(self, sig: int) -> None:
        self._signals += 1
        name = signal.Signals(sig).name
        if self._signals == 1:
            logger.info(
                "%s: stopping the runners (%s); running tasks have %.0f s to finish "
                "(signal again to stop at once)",
                name,
                ", ".join(map(str, self.children)) or "none running",
                self.grace_period,
            )
            self._stopping.set()
            self._kill_later(self.grace_period + STOP_MARGIN)
        else:
            logger.warning(
                "%s again: stopping the runners at once; their running tasks come back "
                "when their leases end",
                name,
            )
            self._clean = False
            self._kill_later(HURRY)
        for child in list(self.children.values()):
            _send(child, signal.SIGTERM)

    def _kill_later(self, delay: float) -> None:
        if self._kill_timer is not None:
            self._kill_timer.cancel()
        self._kill_timer = asyncio.get_running_loop().call_later(delay, self._kill, delay)

    def _kill(self, waited: float) -> None:
        if not self.children:
            return
        logger.warning(
            "runner(s) %s still running %.0f s after the signal: killing them (SIGKILL)",
            ", ".join(map(str, self.children)),
            waited,
        )
        self._clean = False
        for child in list(self.children.values()):
            _send(child, signal.SIGKILL)


def _send(child: asyncio.subprocess.Process, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # (it has just ended)
        child.send_signal(sig)


def _ending(code: int) -> str:
    """How a process ended, from its return code, in words."""
    if code < 0:
        return f"was killed by {signal.Signals(-code).name}"
    return f"exited with code {code}"


def runner_command(module: str, flags: Mapping[str, object], log_level: str) -> list[str]:
    """The command of one runner: ``culex run MODULE`` with the given settings ``flags``
    (as parsed: text, or True/False for an on/off setting), run by this interpreter."""
    kinds = config.kinds()
    command = [sys.executable, "-m", "culex", "--log-level", log_level, "run", module]
    for name, value in flags.items():
        flag = name.replace("_", "-")
        if kinds[name] == "flag":
            command.append(f"--{flag}" if value else f"--no-{flag}")
        else:
            command.append(f"--{flag}={value}")
    return command


def supervise(
    module: str,
    flags: Mapping[str, object],
    log_level: str,
    processes: int,
    *,
    max_tasks: int | None = None,
    max_memory_mb: int | None = None,
) -> int:
    """Run ``processes`` runners of ``module`` (already imported here, so known to load)
    with the settings ``flags``, each replaced once it has run ``max_tasks`` tasks or its
    RSS has passed ``max_memory_mb``; the exit code."""
    settings = config.settings()
    flags = dict(flags)
    if not settings.redis_url:
        # The embedded server, started here once (or found) rather than by N runners at
        # once; its URL (a unix socket, no password) is given to each.
        flags["redis_url"] = configured.resolve_url(None)
    command = runner_command(module, flags, log_level)
    if max_tasks is not None:
        command.append(f"--max-tasks-per-process={max_tasks}")
    if max_memory_mb is not None:
        command.append(f"--max-memory-per-process={max_memory_mb}")
    return Supervisor(command, processes, settings.grace_period).run()


def follow(lifeline: int) -> None:
    """In a runner the supervisor started: stop (one SIGTERM, a graceful stop) when the
    supervisor ends, which ends the pipe ``lifeline`` reads from."""

    def watch() -> None:
        while os.read(lifeline, 1):
            pass
        logger.warning("the supervisor has ended: stopping")
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="culex-supervisor", daemon=True).start()
