"""The runner: takes tasks from queues, runs them, and reports each outcome, fenced.

The Runner holds the life cycle, the slots and the stop; its loops are given the settings
and a driver, one concern each: the claim loop (culex.runner.claimer), the reporter
(culex.runner.reporter), the reclaimer (culex.runner.reclaimer) and the periodic
scheduler (culex.periodic) run on its asyncio loop; a thread renews the leases of every
held task (culex.runner.lease), so a task that blocks the loop does not lose its lease.

A stop hands back what is still running when the grace period ends. Python cannot end a
thread, so a sync perform still running then would go on beside the run another runner
starts: :meth:`Runner.run` (which owns the process) hands its task back and ends the
process at once; :meth:`Runner.arun` on a loop of the application's own does not hand
such a task back but waits for it (docs/reliability.md, "Graceful stop").
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import logging
import os
import signal
import socket
import time
from collections import deque
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NoReturn

from .. import config, logs
from .._redis import commands
from .._redis.claims import Claimed
from .._redis.drivers import AsyncDriverProtocol
from .._redis.keys import queue_keys
from .._redis.scripts import MOST
from .._redis.spin import loop_factory
from ..errors import ConfigurationError, ServerError, ServerUnavailable
from ..jobs.job import Job
from ..jobs.periodic import periodic_jobs
from ..jobs.progress import Reporting
from ..jobs.registry import JobRegistry, registry
from ..server import configured
from ..server.compatibility import PROTOCOL
from . import isolation
from .attempt import Outcome, attempt, broken, decode, task_name
from .cancels import CancelWatcher
from .claimer import Claimer
from .lease import LeaseKeeper
from .reclaimer import Reclaimer
from .reporter import Reporter
from .scheduler import Scheduler

logger = logging.getLogger("culex")

HELPER_STOP_TIMEOUT = 5.0  # seconds a helper loop may take to stop
CANCEL_REQUESTED = "culex: the task's cancel was requested"  # the message of that cancel


class Runner:
    """Runs the tasks of the given queues (default: every registered job's queue).

    ``run_from`` names the queues, each with a weight if it should be asked more often
    than others: ``["critical:6", "default:3", "low:1"]`` or ``{"critical": 6, ...}``."""

    def __init__(
        self,
        run_from: Iterable[str] | Mapping[str, int] | None = None,
        concurrency: int | None = None,
        *,
        redis_url: str | None = None,
        jobs: JobRegistry = registry,
    ) -> None:
        flags: dict[str, object] = {}
        if run_from is not None:
            flags["run_from"] = run_from if isinstance(run_from, str | Mapping) else list(run_from)
        if concurrency is not None:
            flags["concurrency"] = concurrency
        if redis_url is not None:
            flags["redis_url"] = redis_url
        self.settings = config.settings(**flags)
        self.jobs = jobs
        self.weights = config.queue_weights(self.settings.run_from)
        self.queues = list(self.weights) or jobs.queues()
        if not self.queues:
            raise ConfigurationError(
                "nothing to run: no job class is registered and run_from names no queue"
            )
        # Its name in the runner registry: host, pid and a random part (a pid is reused).
        self.id = f"{socket.gethostname()}:{os.getpid()}:{os.urandom(4).hex()}"
        self._stopping = asyncio.Event()
        self._running: dict[asyncio.Task[None], Claimed] = {}  # the slots taken
        self._slot_freed = asyncio.Event()
        self._reports: list[Outcome] = []  # the reporter's outbox
        self._report_ready = asyncio.Event()
        self._reports_landed = asyncio.Event()  # clear while reports wait for the server
        self._reports_landed.set()
        self._keeper: LeaseKeeper | None = None
        self._claimer: Claimer | None = None
        self._pool = _Pool(self.settings.concurrency)
        self._threaded: set[Claimed] = set()  # running tasks whose perform runs in a thread
        self._jobs: dict[Claimed, Job] = {}  # the attempts running now: a cancel stops them
        self._default_lease_ms = self.settings.lease_ms  # (read per task: computed once)
        self._owns_process = False  # run(), not arun() on an application's loop
        self._signals = 0
        self._url: str | None = None  # the server's, once arun resolved it
        self._reporting: dict[str, Reporting] = {}  # where each queue's jobs report progress

    # -- starting and stopping ------------------------------------------------------

    def run(self) -> None:
        """Run until SIGINT/SIGTERM (or :meth:`stop`), then stop gracefully.

        This owns the process: when a sync perform still runs in a thread once the grace
        period is over, its task is handed back and the process ends at once (exit code
        0, the log written out, no exit handlers), so that it never runs beside another
        runner's run of the task; run() does not return then.

        The loop's selector polls briefly before it sleeps (``busy_poll``,
        culex._redis.spin), unless an event loop policy of the application's own is set.
        """
        self._owns_process = True
        with asyncio.Runner(loop_factory=loop_factory(self.settings.busy_poll)) as runner:
            runner.run(self.arun(handle_signals=True))
        if self._pool.busy:  # e.g. a perform that timed out and runs on in its thread
            logger.warning(
                "%d sync perform(s) still run in threads; ending the process rather than "
                "waiting for them",
                self._pool.busy,
            )
            _exit_now(0)

    def _identity(self) -> dict[str, str]:
        """What the runner registry says of this runner (``culex runners``)."""
        return {
            "id": self.id,
            "host": socket.gethostname(),
            "pid": str(os.getpid()),
            "queues": ",".join(self.queues),
            "concurrency": str(self.settings.concurrency),
            "version": culex_version(),
            "protocol": str(PROTOCOL),  # (what it honours: a record without it is older)
            "started": str(round(time.time() * 1000)),
            # (what its job classes declare, per queue: culex limit shows it with its source)
            "limits": json.dumps(
                {q: found for q in self.queues if (found := self.jobs.declared_limits(q))}
            ),
        }

    def _queues_said(self) -> str:
        """The queues as the log says them: with their weights, or in strict order."""
        if self.settings.strict_queues:
            return ", ".join(self.queues) + " (strict: in this order)"
        if len(set(self.weights.values())) > 1:
            return ", ".join(f"{q}:{w}" for q, w in self.weights.items()) + " (weighted)"
        return ", ".join(self.queues)

    def stop(self) -> None:
        """Ask the runner to stop: no more claims; running tasks finish or go back."""
        self._stopping.set()

    async def arun(self, *, handle_signals: bool = False) -> None:
        """Run on the current event loop until :meth:`stop` is called.

        It never ends the process: a task whose sync perform still runs in a thread when
        the grace period is over is not handed back; arun() waits for it to end."""
        loop = asyncio.get_running_loop()
        if handle_signals:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, self._on_signal, sig)
        url = self._url = configured.resolve_url(self.settings.redis_url)
        self._reporting = {
            q: Reporting(url, queue_keys(self.settings.prefix, q)) for q in self.queues
        }
        driver = await self._connect(url)
        self._keeper = keeper = LeaseKeeper(self.settings, url, self._identity())
        keeper.start()
        logger.info("culex is buzzing...")
        logger.info("Queues: %s", self._queues_said())
        served = set(self.jobs.queues())
        if unserved := [q for q in self.queues if q not in served]:
            logger.warning(
                "No job class this runner knows runs on %s: a task found there goes to dead as "
                "one of an unknown job type (check the queues and the module given to it)",
                ", ".join(unserved),
            )
        logger.info("Server: %s", driver.where)  # (without its password)
        await self._say_paused(driver)
        claimer, reporter, helpers = self._start_loops(driver, keeper)
        try:
            await claimer.run()
            await claimer.settle()
            await self._finish(reporter)
        finally:
            await claimer.close()
            self._stopping.set()
            reporter.close()
            await self._stop_helpers(helpers)
            keeper.stop()
            await driver.close()
            self._pool.shutdown(wait=False, cancel_futures=True)
            if handle_signals:
                for sig in (signal.SIGINT, signal.SIGTERM):
                    loop.remove_signal_handler(sig)
            logger.info("culex stopped")

    async def _connect(self, url: str) -> AsyncDriverProtocol:
        driver = await configured.new_async_driver(url, self.settings.socket_timeout, retry_for=0)
        try:
            await self._check_server(driver)
        except BaseException:
            await driver.close()
            raise
        return driver

    def _start_loops(
        self, driver: AsyncDriverProtocol, keeper: LeaseKeeper
    ) -> tuple[Claimer, Reporter, list[asyncio.Task[Any]]]:
        """The claim loop (arun runs it), and the helper loops, started as tasks."""
        self._claimer = Claimer(
            self.settings,
            driver,
            self.queues,
            limits={q: self.jobs.queue_limits(q) for q in self.queues},
            weights=self.weights,
            start=self._start,
            running=self._running,
            slot_freed=self._slot_freed,
            stopping=self._stopping,
            reports_landed=self._reports_landed,
        )
        reporter = Reporter(
            self.settings, driver, keeper, self._reports, self._report_ready, self._reports_landed
        )
        own_stalls = {q: self.jobs.own_stalls(q) for q in self.queues}
        reclaimer = Reclaimer(self.settings, driver, self.queues, own_stalls)
        watcher = CancelWatcher(self.settings, driver, self._held, self._cancel)
        helpers = [
            asyncio.create_task(reporter.run(), name="culex-reporter"),
            asyncio.create_task(reclaimer.run(self._stopping), name="culex-reclaim"),
            asyncio.create_task(watcher.run(self._stopping), name="culex-cancels"),
        ]
        periodic = periodic_jobs(self.jobs, self.queues)
        if self.settings.run_cron_scheduler and periodic:
            schedule = Scheduler(periodic, self.settings, driver).run(self._stopping)
            helpers.append(asyncio.create_task(schedule, name="culex-periodic"))
        return self._claimer, reporter, helpers

    async def _stop_helpers(self, helpers: list[asyncio.Task[Any]]) -> None:
        """Stop the helper loops. Each also ends on its own once stopping is set, so a
        cancellation lost inside a client library cannot keep the runner from exiting."""
        for helper in helpers:
            helper.cancel()
        _, stuck = await asyncio.wait(helpers, timeout=HELPER_STOP_TIMEOUT)
        for helper in stuck:
            logger.warning("%s did not stop in time; leaving it", helper.get_name())
        for helper in helpers:
            if helper.done() and not helper.cancelled() and helper.exception() is not None:
                logger.error("%s failed", helper.get_name(), exc_info=helper.exception())

    async def _say_paused(self, driver: AsyncDriverProtocol) -> None:
        """Warn of the queues that are paused as the runner starts: it takes nothing from
        them, and would look stuck."""
        controls = await driver.run_many(
            [commands.read_control(queue_keys(self.settings.prefix, q)) for q in self.queues]
        )  # (one round trip; a control key of another type: its ServerError, skipped as
        # claim.lua skips it)
        paused = [
            queue
            for queue, control in zip(self.queues, controls, strict=True)
            if isinstance(control, dict) and control.get("paused") == "1"
        ]
        if paused:
            logger.warning(
                "Paused: %s (their tasks wait until resumed: culex resume QUEUE)", ", ".join(paused)
            )

    async def _check_server(self, driver: AsyncDriverProtocol) -> None:
        """Refuse a server that may evict keys: eviction silently deletes queue state."""
        try:
            reply = await driver.run(commands.config_get("maxmemory-policy"))
        except ServerUnavailable:
            raise
        except ServerError as exc:  # CONFIG is often disabled on managed servers
            logger.warning("cannot read maxmemory-policy (%s); make sure it is noeviction", exc)
            return
        if reply in (None, "noeviction"):
            return
        message = (
            f"the server's maxmemory-policy is {reply!r}: it may evict queue keys and lose "
            "tasks. Set it to noeviction (CONFIG SET maxmemory-policy noeviction)"
        )
        if not self.settings.allow_eviction:
            raise ConfigurationError(f"{message}, or set allow_eviction=True to run anyway")
        logger.warning("DANGER: %s; running anyway because allow_eviction is set", message)

    def _on_signal(self, sig: int) -> None:
        self._signals += 1
        if self._signals == 1:
            logger.info(
                "%s: stopping; running tasks have %.0f s to finish (signal again to stop at once)",
                signal.Signals(sig).name,
                self.settings.grace_period,
            )
            self.stop()
        else:
            logger.warning("stopping at once; running tasks come back when their lease ends")
            isolation.kill()
            _exit_now(1)

    async def _finish(self, reporter: Reporter) -> None:
        """Graceful stop: wait up to grace_period, then hand unfinished tasks back.

        No task is handed back while its perform still runs in this process: a child
        process is killed first; a thread cannot be, so run() ends the process just after
        the hand-back, and arun() keeps such a task and waits for it instead."""
        if self._running:
            _, unfinished = await asyncio.wait(
                list(self._running), timeout=self.settings.grace_period
            )
            held = {task: self._running[task] for task in unfinished}
            isolation.kill(claimed.id for claimed in held.values())
            threads = [task for task, claimed in held.items() if claimed in self._threaded]
            for task in threads if not self._owns_process else ():
                logger.warning(
                    "task %s runs on in a thread after the grace period; a thread cannot be "
                    "stopped, so it is not handed back: waiting for it to end",
                    task_name(held.pop(task)),
                )
            for task in held:
                task.cancel()
            if threads and self._owns_process:
                await reporter.flush()
                await self._release_and_exit(reporter, list(held.values()))
            if held:
                await self._release(reporter, list(held.values()))
            if threads:
                await asyncio.wait(threads)
        await reporter.flush()

    async def _release_and_exit(self, reporter: Reporter, held: list[Claimed]) -> NoReturn:
        """Hand ``held`` back and end the process at once, with the threads that still run
        their performs: nothing of this process runs them once another runner can."""
        logger.warning(
            "the grace period is over; handing back to waiting %s, and ending the process "
            "with the threads that still run them",
            ", ".join(task_name(claimed) for claimed in held),
        )
        logs.flush_all()  # before the hand-back: from then on, not a moment is lost
        results = await reporter.hand_back(held)
        failed = [claimed for claimed, done in zip(held, results, strict=True) if done is not True]
        for claimed in failed:
            logger.warning(
                "task %s could not be handed back: it comes back when its lease ends",
                task_name(claimed),
            )
        _exit_now(0)

    async def _release(self, reporter: Reporter, held: list[Claimed]) -> None:
        handed = await reporter.hand_back(held)
        for claimed, result in zip(held, handed, strict=True):
            if result is True:
                logger.info("task %s handed back to waiting", task_name(claimed))
            self._drop(claimed)

    # -- running ----------------------------------------------------------------------

    def _start(self, claimed: Claimed) -> None:
        if logger.isEnabledFor(logging.INFO):
            job = claimed.type or "no job type"
            logs.task_line(logger, "Running task %s (%s)", task_name(claimed), job)
        task = asyncio.create_task(self._execute(claimed))
        self._running[task] = claimed
        task.add_done_callback(self._done)

    async def _execute(self, claimed: Claimed) -> None:
        """One attempt, from its start to its outcome in the reporter's outbox.

        The lease keeper holds the task only from here: until the reporter drops it once
        its report landed, or, for an attempt that ends with no outcome (a stop cancelled
        it: it is handed back), until the ``finally`` below. No path leaves a task renewed
        that this runner no longer runs."""
        keeper = self._keeper
        assert keeper is not None
        keeper.hold(claimed, self._default_lease_ms)
        outcome: Outcome | None = None
        try:
            outcome = await self._attempt(claimed, keeper)
        finally:
            if outcome is None:
                keeper.drop(claimed)
        keeper.finish(claimed)
        self._reports.append(outcome)
        self._report_ready.set()

    def _prepare(self, claimed: Claimed, keeper: LeaseKeeper) -> Job | Outcome:
        """The job object to run, set up; or the dead Outcome of a broken task."""
        job = decode(claimed, self.jobs, self.settings.max_payload_bytes)
        if isinstance(job, Outcome):
            return job
        if job.lease is not None:  # the job's own lease, set at once
            # (at most the longest heartbeat.lua takes, as the setting is: config.py)
            lease_ms = min(MOST, round(config.seconds(job.lease, "lease") * 1000))
            if lease_ms != self._default_lease_ms:
                keeper.hold(claimed, lease_ms)
        job.reporting_ = self._reporting[claimed.queue]
        return job

    async def _attempt(self, claimed: Claimed, keeper: LeaseKeeper) -> Outcome:
        try:
            job = self._prepare(claimed, keeper)
        except Exception as exc:  # (decode's own are caught there: this is the rest)
            return broken(claimed, f"{type(exc).__name__}: {exc}", exc)
        if isinstance(job, Outcome):
            return job
        if not job.async_perform_ and job.isolation == "thread":
            self._threaded.add(claimed)
        self._jobs[claimed] = job
        try:
            outcome = await attempt(job, claimed, self._pool)
        except asyncio.CancelledError as exc:
            _check_cancel_requested(job, exc)
        finally:
            del self._jobs[claimed]
        # (the field, not the property: a job class may have a `cancelled` of its own)
        if job._cancel_requested:
            # Whatever perform did once told (returned early, raised, was killed): the
            # task ends as cancelled; fail.lua stores the request's reason, no retry.
            logger.warning("task %s was cancelled while running", task_name(claimed))
            outcome = Outcome(claimed, error="cancelled", retry_delay_ms=None)
        return outcome

    def _held(self) -> list[tuple[str, str]]:
        """The (queue, id) of each attempt running now (CancelWatcher reads their queues)."""
        return [(claimed.queue, claimed.id) for claimed in self._jobs]

    def _cancel(self, queue: str, task_id: str) -> None:
        """The task's cancel was requested (CancelWatcher): stop its attempt. Python cannot
        stop a thread: a sync perform sees ``job.cancelled`` and returns early."""
        held = next((c for c in self._jobs if c.id == task_id and c.queue == queue), None)
        if held is None:
            return
        job = self._jobs[held]
        run = next(task for task, claimed in self._running.items() if claimed is held)
        if job.isolation == "process" and not job.async_perform_:
            # Asked again at each check while it runs: a child forked just after a kill
            # found none is killed at the next.
            job._cancel_requested = True
            asyncio.get_running_loop().run_in_executor(None, isolation.kill, [task_id])
            return
        if job._cancel_requested:
            return
        job._cancel_requested = True
        if job.async_perform_:
            run.cancel(CANCEL_REQUESTED)

    def _drop(self, claimed: Claimed) -> None:
        if self._keeper is not None:
            self._keeper.drop(claimed)

    def _done(self, task: asyncio.Task[None]) -> None:
        claimed = self._running.pop(task, None)
        if claimed is not None:
            self._threaded.discard(claimed)
        self._slot_freed.set()
        if not task.cancelled() and task.exception() is not None:
            logger.error("a task's execution raised", exc_info=task.exception())


class _Pool(ThreadPoolExecutor):
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


def culex_version() -> str:
    """culex's version as installed ("" when it is not installed, e.g. run from a tree)."""
    try:
        return importlib.metadata.version("culex")
    except importlib.metadata.PackageNotFoundError:
        return ""


def _exit_now(code: int) -> NoReturn:
    """End the process with its threads, skipping exit handlers (which would wait for
    them), once the log is written out."""
    logs.flush_all()
    os._exit(code)


def _check_cancel_requested(job: Job, exc: asyncio.CancelledError) -> None:
    """An attempt's task was cancelled: by Runner._cancel (its cancel was requested: the
    attempt ends, as cancelled), or by a stop of the runner, which goes on as a stop (the
    task is handed back): ``exc`` is raised again then."""
    if not job._cancel_requested or exc.args != (CANCEL_REQUESTED,):
        raise exc
    current = asyncio.current_task()
    if current is not None and current.uncancel():  # (a stop asked as well)
        raise exc
