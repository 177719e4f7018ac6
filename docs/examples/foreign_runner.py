"""Run culex tasks without culex: plain redis-py and the documented scripts.

Usage: python foreign_runner.py REDIS_URL LUA_DIR QUEUE COUNT [IDLE_WAIT]

Runs the tasks of QUEUE whose job type is in JOBS until COUNT tasks have ended (succeeded
or dead), one at a time, and prints a line per report: `<id> <outcome>`. Any
language with a Redis client can do the same (docs/wire-format.md, "A runner in another
language"). Kept short on purpose: a task runs in the loop itself, so it must end well
within the lease (a longer one needs heartbeat.lua every lease/3 from beside it, and a
read of the cancels set about once a second).
"""

import json
import os
import socket
import sys
import time
import uuid

import redis

PREFIX = "culex"
# What a culex runner would take from its settings and job classes (not in Redis).
LEASE_MS = 30_000  # lease
RESULT_TTL_MS = 3_600_000  # result_ttl: how long a result other than null is kept
NULL_TTL_MS = 1_000  # successful_job_ttl: how long a succeeded task with null is kept
DEAD_TTL_MS = 86_400_000  # failed_job_ttl
DEAD_MAX = 10_000  # dead_max
RECLAIM_EVERY = 2.0  # s between reclaim passes
SCRIPTS = ("claim", "complete", "fail", "reclaim", "beat")


def add(params, attempt):
    return params["a"] + params["b"]


def flaky(params, attempt):
    if attempt == 1:
        raise ConnectionError("the first attempt fails")
    return "ok"


def broken(params, attempt):
    raise ValueError("always fails")


JOBS = {"AddJob": add, "FirstTryFailsJob": flaky, "NeverWorksJob": broken}


class Runner:
    def __init__(self, client, lua_dir, queue, idle_wait):
        self.client = client
        self.queue = queue
        self.idle_wait = idle_wait
        self.id = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.started = int(time.time() * 1000)
        base = f"{PREFIX}:{{{queue}}}"  # the queue's hash tag: every key in one slot
        self.key = {
            name: f"{base}:{name}"
            for name in ("waiting", "pending", "scheduled", "dead", "signal", "control",
                         "starts", "dedupe", "cancels", "task:", "done:", "stats:",
                         "periodic:", "groups:")
        }  # fmt: skip
        self.script = {}
        for name in SCRIPTS:
            with open(os.path.join(lua_dir, name + ".lua")) as f:
                self.script[name] = client.register_script(f.read())  # EVALSHA; on NOSCRIPT, loads

    def run(self, count):
        """Claim, run and report until ``count`` tasks have ended."""
        self.client.sadd(f"{PREFIX}:queues", self.queue)  # makes the queue visible
        self.beat(LEASE_MS)
        ended, last_reclaim, last_beat = 0, 0.0, time.monotonic()
        try:
            while ended < count:
                if time.monotonic() - last_reclaim >= RECLAIM_EVERY:
                    self.reclaim()
                    last_reclaim = time.monotonic()
                if time.monotonic() - last_beat >= LEASE_MS / 3000:
                    self.beat(LEASE_MS)
                    last_beat = time.monotonic()
                reply = self.claim(1)
                for task in reply[2:]:
                    ended += self.perform(*task) in ("succeeded", "dead")
                if len(reply) == 2:  # claimed fewer than asked: wait for work
                    self.wait(now_us=reply[0], next_ms=reply[1])
        finally:
            self.beat(0)  # leaves the registry

    def claim(self, limit):
        k = self.key
        keys = [k["waiting"], k["pending"], k["scheduled"], k["dead"], k["task:"], k["done:"],
                k["stats:"], k["control"], k["starts"], k["dedupe"], k["groups:"], k["cancels"],
                k["periodic:"]]  # fmt: skip
        # no limits declared here (0): limits set at run time in the control hash apply
        return self.script["claim"](keys=keys, args=[limit, LEASE_MS, 1000, DEAD_TTL_MS, 0, 0, 0])

    def wait(self, now_us, next_ms):
        """Block until a task is signalled, idle_wait passes, or next_ms (absolute server
        ms) comes: nothing signals a task that enters scheduled."""
        wait = self.idle_wait
        if next_ms != -1:
            wait = min(wait, (next_ms * 1000 - now_us) / 1e6)
        if wait > 0:  # (a next_ms already passed: claim again at once; BLPOP 0 never ends)
            self.client.blpop([self.key["signal"]], timeout=max(wait, 0.001))

    def perform(self, task_id, attempt, job_type, params, retry_count, max_retries, *rest):
        """Run one claimed task and report it; returns the report's outcome."""
        task_id, job_type = task_id.decode(), job_type.decode()
        job = JOBS.get(job_type)
        if job is None:  # not ours to run, nor to leave: dead as broken, as culex does
            return self.fail(task_id, attempt, f"broken task: unknown job type {job_type}", -1)
        try:
            values = json.loads(params)
        except ValueError as exc:
            return self.fail(task_id, attempt, f"broken task: params are not valid JSON: {exc}", -1)
        try:
            result = job(values, attempt)
        except Exception as exc:
            # The hash's max_retries decides (claim's field 6; "" for none: 4), 2 s x n^2.
            n = int(retry_count) + 1
            allowed = int(max_retries) if max_retries else 4
            delay = 2000 * n * n if n <= allowed else -1
            return self.fail(task_id, attempt, f"{type(exc).__name__}: {exc}", delay)
        return self.complete(task_id, attempt, json.dumps(result))

    def complete(self, task_id, attempt, result):
        k = self.key
        keys = [k["pending"], k["task:"], k["periodic:"], k["done:"], k["stats:"], k["control"],
                k["signal"], k["dedupe"], k["groups:"], k["cancels"]]  # fmt: skip
        ttl = NULL_TTL_MS if result == "null" else RESULT_TTL_MS
        refused = self.script["complete"](keys=keys, args=[task_id, attempt, result, ttl])
        return self.said(task_id, "refused" if refused else "succeeded")

    def fail(self, task_id, attempt, error, delay):
        k = self.key
        keys = [k["task:"] + task_id, k["pending"], k["scheduled"], k["dead"], k["periodic:"],
                k["done:"] + task_id, k["stats:"], k["control"], k["signal"], k["dedupe"],
                k["groups:"], k["cancels"]]  # fmt: skip
        args = [task_id, attempt, error, delay, DEAD_TTL_MS, DEAD_MAX]
        outcome = self.script["fail"](keys=keys, args=args)
        return self.said(task_id, outcome.decode() if outcome else "refused")

    def reclaim(self):
        k = self.key
        keys = [k["pending"], k["scheduled"], k["dead"], k["task:"], k["waiting"], k["signal"],
                k["periodic:"], k["done:"], k["stats:"], k["control"], k["dedupe"],
                k["groups:"], k["cancels"]]  # fmt: skip
        self.script["reclaim"](keys=keys, args=[100, DEAD_TTL_MS, DEAD_MAX, LEASE_MS])

    def beat(self, ttl_ms):
        """The runner's record in the registry (ttl_ms 0: removed): every field culex
        runners and the dashboard read."""
        fields = {
            "id": self.id, "host": socket.gethostname(), "pid": os.getpid(),
            "queues": self.queue, "concurrency": 1, "version": "foreign-runner/1",
            "started": self.started, "tasks": "[]",
        }  # fmt: skip
        keys = [f"{PREFIX}:{{runners}}", f"{PREFIX}:{{runners}}:runner:{self.id}"]
        args = [self.id, ttl_ms, *[x for pair in fields.items() for x in pair]]
        self.script["beat"](keys=keys, args=args)

    def said(self, task_id, outcome):
        print(task_id, outcome, flush=True)
        return outcome


def main():
    url, lua_dir, queue, count = sys.argv[1:5]
    idle_wait = float(sys.argv[5]) if len(sys.argv) > 5 else 0.1  # culex's default
    # a read must be allowed to last longer than the longest BLPOP (redis-py's default is 5 s)
    client = redis.Redis.from_url(url, socket_timeout=idle_wait + 5)
    Runner(client, lua_dir, queue, idle_wait).run(int(count))


if __name__ == "__main__":
    main()
