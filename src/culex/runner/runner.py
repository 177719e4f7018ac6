"""The runner: takes tasks from queues, runs them, and reports each outcome, fenced.

The Runner holds the life cycle and its parts, each a named collaborator: the slots of the
attempts running now (culex.runner.slots), the outbox of their outcomes
(culex.runner.outbox), and the loops, given the settings and a driver, one concern each:
the claim loop (culex.runner.claimer), the reporter (culex.runner.reporter), the
reclaimer (culex.runner.reclaimer), the cancel watcher (culex.runner.cancels) and the
periodic scheduler (culex.runner.scheduler) run on its asyncio loop; a thread renews the
leases of every held task (culex.runner.lease), so a task that blocks the loop does not
lose its lease. Each attempt is prepared (culex.runner.attempt) as a drain of
culex.testing prepares it.

A stop hands back what is still running when the grace period ends (culex.runner.stopping):
:meth:`Runner.run` (which owns the process) ends the process at once when a sync perform
still runs in a thread; :meth:`Runner.arun` on a loop of the application's own waits for
it instead (docs/reliability.md, "Graceful stop").

A quiet runner (SIGTSTP, or :meth:`Runner.quiet`) claims no new task: it finishes those it
runs, renews their leases, and says ``quiet`` in its record; SIGUSR2 (:meth:`Runner.resume`)
makes it take tasks again, and SIGTERM stops it as ever. SIGCONT does not resume it: the
kernel and job control send SIGCONT to any process they stopped and continue (a SIGSTOP
and SIGCONT pair, ``cpulimit``), which must not undo a quiet asked on purpose. A runner a
supervisor started (culex.runner.supervised) takes SIGUSR1 as "retire": quiet, then it
stops once nothing runs (recycling).
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from .. import config, logs
from .._redis.claims import Claimed
from .._redis.drivers import AsyncDriverProtocol
from .._redis.keys import queue_keys
from .._redis.spin import loop_factory
from ..errors import ConfigurationError
from ..jobs.job import Job
from ..jobs.periodic import periodic_jobs
from ..jobs.progress import Reporting
from ..jobs.registry import JobRegistry, registry
from ..server import configured
from . import isolation, startup
from .attempt import Preparation, attempt, with_lines
from .cancels import CancelWatcher, check_cancel_requested
from .claimer import Claimer
from .lease import LeaseKeeper
from .outbox import Outbox
from .outcome import Outcome, task_name
from .pool import Pool
from .reclaimer import Reclaimer
from .releaser import Releaser
from .reporter import Reporter
from .scheduler import Scheduler
from .slots import Slots
from .stopping import exit_now, finish, start_helpers, stop_helpers
from .supervised import Supervised
from .wrapping import tell_ended

logger = logging.getLogger("culex")


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
        self.id = startup.runner_id()
        self._stopping = asyncio.Event()
        self._slots = Slots(self.settings.concurrency)  # the attempts running now
        self._outbox = Outbox()  # their outcomes, for the reporter
        self._keeper: LeaseKeeper | None = None
        self._claimer: Claimer | None = None
        self._pool = Pool(self.settings.concurrency)
        self._default_lease_ms = self.settings.lease_ms  # (read per task: computed once)
        # (where each queue's jobs report progress, and the keeper's hold: set by arun)
        self._preparation = Preparation(
            jobs, self.settings.max_payload_bytes, {}, default_lease_ms=self._default_lease_ms
        )
        self._prepare = self._preparation.prepare
        self._owns_process = False  # run(), not arun() on an application's loop
        self._signals = 0
        self._url: str | None = None  # the server's, once arun resolved it
        self._claiming = asyncio.Event()  # clear while quiet
        self._claiming.set()
        self._retiring = False  # quiet for good: it stops once nothing runs
        self._retirement: asyncio.Task[None] | None = None  # (until then)
        self._reporter: Reporter | None = None
        self._handing: set[asyncio.Task[None]] = set()  # tasks claimed once quiet, going back
        # Set by culex run in a runner a supervisor started: its pipe to the supervisor.
        self.supervised: Supervised | None = None

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
            exit_now(0)

    def stop(self) -> None:
        """Ask the runner to stop: no more claims; running tasks finish or go back."""
        self._stopping.set()

    @property
    def is_quiet(self) -> bool:
        """Whether the runner takes no new task (quiet)."""
        return not self._claiming.is_set()

    def quiet(self) -> None:
        """Take no new task: those running finish (their leases renewed), and the record
        says ``quiet``, until :meth:`resume`. Call it on the runner's loop."""
        if self._claiming.is_set():
            self._claiming.clear()
            logger.info("quiet: taking no new task; the %d running go on", len(self._slots.running))
            if self._keeper is not None:
                self._keeper.say(state=startup.QUIET)

    def resume(self) -> None:
        """Take tasks again after :meth:`quiet` (not once retiring). Call it on the
        runner's loop."""
        if self._retiring or self._claiming.is_set():
            return
        self._claiming.set()
        logger.info("taking tasks again")
        if self._keeper is not None:
            self._keeper.say(state=startup.RUNNING)

    def _retire(self) -> None:
        """Quiet for good, and stop once nothing runs (the supervisor replaces it)."""
        if self._retiring:
            return
        self._retiring = True
        self.quiet()
        assert self.supervised is not None  # (only a supervised runner takes SIGUSR1)
        retire = self.supervised.retire(self._slots, self.stop)
        self._retirement = asyncio.create_task(retire, name="culex-retire")

    async def arun(self, *, handle_signals: bool = False) -> None:
        """Run on the current event loop until :meth:`stop` is called.

        It never ends the process: a task whose sync perform still runs in a thread when
        the grace period is over is not handed back; arun() waits for it to end."""
        loop = asyncio.get_running_loop()
        if handle_signals:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, self._on_signal, sig)
            loop.add_signal_handler(signal.SIGTSTP, self.quiet)
            loop.add_signal_handler(signal.SIGUSR2, self.resume)
            if self.supervised is not None:
                loop.add_signal_handler(signal.SIGUSR1, self._retire)
                self.supervised.ready()
        url = self._url = configured.resolve_url(self.settings.redis_url)
        driver = await self._connect(url)
        settings = self.settings
        said = startup.identity(self.id, self.queues, settings.concurrency, self.jobs)
        if self.is_quiet:  # (quiet before it started)
            said["state"] = startup.QUIET
        self._keeper = keeper = LeaseKeeper(settings, url, said)
        self._preparation.reporting = {
            q: Reporting(url, queue_keys(settings.prefix, q)) for q in self.queues
        }
        self._preparation.keep(keeper)
        keeper.start()
        logger.info("culex is buzzing...")
        queues = startup.queues_said(self.queues, self.weights, settings.strict_queues)
        logger.info("Queues: %s", queues)
        startup.warn_unserved(self.queues, self.jobs)
        logger.info("Server: %s", driver.where)  # (without its password)
        await startup.say_paused(driver, settings.prefix, self.queues)
        claimer, reporter, helpers = self._start_loops(driver, keeper)
        try:
            await claimer.run()
            await claimer.settle()
            await asyncio.gather(*self._handing)
            grace = settings.grace_period
            await finish(self._slots, reporter, keeper, grace, owns_process=self._owns_process)
        finally:
            await claimer.close()
            self._stopping.set()
            if self._retirement is not None:
                self._retirement.cancel()
            reporter.close()
            await stop_helpers(helpers)
            keeper.stop()
            await driver.close()
            self._pool.shutdown(wait=False, cancel_futures=True)
            if handle_signals:
                for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGTSTP, signal.SIGUSR2):
                    loop.remove_signal_handler(sig)
                if self.supervised is not None:
                    loop.remove_signal_handler(signal.SIGUSR1)
            logger.info("culex stopped")

    async def _connect(self, url: str) -> AsyncDriverProtocol:
        driver = await configured.new_async_driver(url, self.settings.socket_timeout, retry_for=0)
        try:
            await startup.check_server(driver, self.settings)
        except BaseException:
            await driver.close()
            raise
        return driver

    def _start_loops(
        self, driver: AsyncDriverProtocol, keeper: LeaseKeeper
    ) -> tuple[Claimer, Reporter, list[asyncio.Task[Any]]]:
        """The claim loop (arun runs it), and the helper loops, started as tasks."""
        releaser = Releaser(self.settings, driver, self.queues)
        reporter = Reporter(self.settings, driver, keeper, self._outbox, releaser.wake)
        self._reporter = reporter
        self._claimer = Claimer(
            self.settings,
            driver,
            self.queues,
            limits={q: self.jobs.queue_limits(q) for q in self.queues},
            weights=self.weights,
            start=self._start,
            slots=self._slots,
            stopping=self._stopping,
            reports_landed=self._outbox.landed,
            claiming=self._claiming,
            allowance=None if self.supervised is None else self.supervised.left,
            outage=reporter.outage,  # (one for the loops: culex.runner.outage)
        )
        own_stalls = {q: self.jobs.own_stalls(q) for q in self.queues}
        reclaimer = Reclaimer(self.settings, driver, self.queues, own_stalls, reporter.outage)
        watcher = CancelWatcher(self.settings, driver, self._slots)
        loops: dict[str, Callable[[asyncio.Event], Awaitable[None]]] = {
            "culex-reporter": lambda _: reporter.run(),
            "culex-reclaim": reclaimer.run,
            "culex-cancels": watcher.run,
            "culex-release": releaser.run,
        }
        periodic = periodic_jobs(self.jobs, self.queues)
        if self.settings.run_cron_scheduler and periodic:
            loops["culex-periodic"] = Scheduler(periodic, self.settings, driver).run
        return self._claimer, reporter, start_helpers(loops, self._stopping)

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
            exit_now(1)

    # -- running ----------------------------------------------------------------------

    def _start(self, claimed: Claimed) -> None:
        if not self._claiming.is_set():  # (taken by a claim sent before the runner went quiet)
            task = asyncio.create_task(hand_back_unrun(self._reporter, claimed))
            self._handing.add(task)
            task.add_done_callback(self._handing.discard)
            return
        if logger.isEnabledFor(logging.INFO):
            job = claimed.type or "no job type"
            logs.task_line(logger, "Running task %s (%s)", task_name(claimed), job)
        task = asyncio.create_task(self._execute(claimed))
        self._slots.take(task, claimed)
        if self.supervised is not None:
            self.supervised.start()

    async def _execute(self, claimed: Claimed) -> None:
        """One attempt, from its start to its outcome in the reporter's outbox (one coroutine).

        The lease keeper holds the task only from here: until the reporter drops it once
        its report landed, or, for an attempt that ends with no outcome (a stop cancelled
        it: it is handed back), until the ``finally`` below. No path leaves a task renewed
        that this runner no longer runs."""
        keeper = self._keeper
        assert keeper is not None
        keeper.hold(claimed, self._default_lease_ms)
        outcome: Outcome | None = None
        ran: Job | None = None  # (None: a broken task, never built)
        try:
            job = self._prepare(claimed)  # (a job's own lease is held from here)
            if isinstance(job, Outcome):  # a broken task
                outcome = job
            else:
                ran = job
                slots = self._slots  # (where a cancel finds the job, and a stop its thread)
                if not job.async_perform_ and job.isolation == "thread":
                    slots.threaded.add(claimed)
                slots.jobs[claimed] = job
                try:
                    outcome = with_lines(job, await attempt(job, claimed, self._pool))
                except asyncio.CancelledError as exc:
                    check_cancel_requested(job, exc)
                finally:
                    del slots.jobs[claimed]
                # (the field, not the property: a job class may have a `cancelled` of its own)
                if job._cancel_requested:
                    # Whatever perform did once told (returned early, raised, was killed):
                    # the task ends as cancelled; fail.lua stores the request's reason.
                    logger.warning("task %s was cancelled while running", task_name(claimed))
                    lines = outcome.lines if outcome is not None else []
                    outcome = Outcome(claimed, error="cancelled", retry_delay_ms=None)
                    outcome.lines = lines
        finally:
            if outcome is None:
                keeper.drop(claimed)
        assert outcome is not None  # (a cancel that was not asked for goes on as raised)
        keeper.finish(claimed)
        if outcome.over:  # (nothing to report: suspended already, or not its attempt's)
            keeper.drop(claimed)
        elif outcome.error is not None:  # (the middleware's on_failure, on_dead)
            await tell_ended(outcome, ran)
        if not outcome.over or outcome.lines:  # (an ended attempt's lines go out all the same)
            self._outbox.put(outcome)
        if self.supervised is not None:
            self.supervised.ended()


async def hand_back_unrun(reporter: Reporter | None, claimed: Claimed) -> None:
    """Put a task claimed once the runner was quiet back in waiting, unrun."""
    assert reporter is not None
    (result,) = await reporter.hand_back([claimed])
    if result is True:
        logger.info("task %s handed back: this runner is quiet", task_name(claimed))
    else:  # (it comes back when its lease ends)
        logger.warning("task %s could not be handed back", task_name(claimed))
