"""Browsing and bulk actions at scale: 1,000,000 waiting and 100,000 dead tasks.

    python bench/inspection.py [--waiting 1000000] [--dead 100000] [--repeat 7]
                               [--server valkey|redis|PATH]

Fills a private server with task hashes in the wire format (pipelined HSET and ZADD, 50
tasks per ms of score as a bulk enqueue leaves them), then times, each the median of
``--repeat`` runs: the first page of waiting, a page half-way down through a cursor, a
job search (a rare job: one page of 2,000 ids looked at, and the walk of the whole set;
a common one: one page), find_task, queue_counts, and bulk retries of 10,000 dead tasks
(given by id, and found by job type among all the dead). Prints the figures; asserts
nothing.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import redis
from server import arguments, private_server

from culex import config
from culex._redis.keys import queue_keys
from culex.operations import browsing, bulk, inspection

Q = "bench"
K = queue_keys("culex", Q)
T0 = 1_700_000_000_000
RARE = 100_000  # one waiting task in this many is a RareJob


# Writes the bench's tasks inside the server (a bench-only script, not one of culex's): the
# fill of 1,100,000 tasks takes seconds, not the minutes of as many commands sent from here.
FILL = """
local state, first, count = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local every, at, special, a, b = tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6], ARGV[7], ARGV[8]
local t0, per_ms = tonumber(ARGV[9]), 50
local scores = {}
for i = first, first + count - 1 do
  local id = string.format('%s%08d', string.sub(state, 1, 1), i)
  local job = (i % every == at) and special or ((i % 2 == 0) and a or b)
  local score = t0 + math.floor(i / per_ms)
  redis.call('HSET', KEYS[2] .. id, 'id', id, 'type', job, 'queue', ARGV[10], 'state', state,
    'params', '{"to": "someone@example.com", "template": "welcome", "n": ' .. i .. '}',
    'enqueue_time', score, 'due_at', score, 'retry_count', 0, 'attempt', 0, 'max_retries', 4)
  if state == 'dead' then
    redis.call('HSET', KEYS[2] .. id, 'last_error', 'ValueError: the bank said no',
      'retry_count', 4, 'attempt', 5, 'failed_at', score, 'finished_at', score)
  end
  scores[#scores + 1] = score
  scores[#scores + 1] = id
  if #scores >= 1000 then
    redis.call('ZADD', KEYS[1], unpack(scores))
    scores = {}
  end
end
if #scores > 0 then redis.call('ZADD', KEYS[1], unpack(scores)) end
return count
"""


def fill(client: redis.Redis, state: str, count: int, jobs: tuple[int, int, str, str, str]) -> None:
    """``count`` tasks in the wire format in the set of ``state``, 50 per ms of score; job
    types: (every, at, special, a, b): task i is ``special`` when i % every == at, else
    ``a`` or ``b`` in turns."""
    script = client.register_script(FILL)
    for first in range(0, count, 20_000):
        keys = [browsing.state_set(K, state), K.task_prefix]
        script(keys=keys, args=[state, first, min(20_000, count - first), *jobs, T0, Q])


def timed(action: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    """The median time of ``action`` in ms, and its last value."""
    times, value = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        value = action()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times), value


def walk(settings: config.Settings, job: str) -> int:
    """Every page of waiting that holds ``job``; returns how many pages."""
    cursor, pages = None, 0
    while True:
        page = inspection.tasks(Q, "waiting", settings, cursor=cursor, job=job, limit=50)
        pages += 1
        cursor = page.next_cursor
        if cursor is None:
            return pages


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("--waiting", type=int, default=1_000_000)
    parser.add_argument("--dead", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    with private_server(args.server) as server:
        client = redis.Redis.from_url(server.url)
        start = time.perf_counter()
        fill(client, "waiting", args.waiting, (RARE, RARE // 2, "RareJob", "CommonJob", "EmailJob"))
        fill(client, "dead", args.dead, (10, 0, "ChargeJob", "EmailJob", "EmailJob"))
        print(
            f"{server.version()}: filled {args.waiting:,} waiting and {args.dead:,} dead in "
            f"{time.perf_counter() - start:.1f} s; used memory "
            f"{client.info('memory')['used_memory_human']}"
        )
        settings = config.settings(redis_url=server.url)
        report(client, settings, args)


Row = tuple[str, float, str]  # what, ms, a note


def report(client: redis.Redis, settings: config.Settings, args: Any) -> None:
    rows = reads(client, settings, args) + bulk_retries(client, settings, args.dead)
    for name, ms, note in rows:
        print(f"{name:<52}{ms:>10.2f} ms  {note}")


def reads(client: redis.Redis, settings: config.Settings, args: Any) -> list[Row]:
    """Pages, searches, find_task and queue_counts: the median of ``args.repeat`` each."""
    middle = client.zrange(K.waiting, args.waiting // 2, args.waiting // 2, withscores=True)
    member, score = middle[0]
    cursor = browsing.encode_cursor((str(int(score)), member.decode()))
    pages: list[tuple[str, Callable[[], inspection.TaskPage]]] = [
        ("first page of waiting (50, newest first)",
         lambda: inspection.tasks(Q, "waiting", settings)),
        ("a page half-way down, through a cursor",
         lambda: inspection.tasks(Q, "waiting", settings, cursor=cursor)),
        ("search a rare job: one page (2,000 ids looked at)",
         lambda: inspection.tasks(Q, "waiting", settings, job="RareJob")),
        ("search a common job: one page of 50",
         lambda: inspection.tasks(Q, "waiting", settings, job="CommonJob")),
    ]  # fmt: skip
    rows: list[Row] = []
    for name, read in pages:
        ms, page = timed(read, args.repeat)
        rows.append((name, ms, f"{len(page.rows)} rows"))
    ms, count = timed(lambda: walk(settings, "RareJob"), 1)
    rows.append(("search a rare job: every page of waiting", ms, f"{count} pages"))
    ms, found = timed(lambda: inspection.find_task(Q, "d00000042", settings), args.repeat)
    rows.append(("find_task (any state)", ms, found.state))
    ms, counts = timed(lambda: inspection.queue_counts(settings, [Q]), args.repeat)
    rows.append(("queue_counts", ms, f"{counts[Q]['waiting']:,} waiting"))
    return rows


def bulk_retries(client: redis.Redis, settings: config.Settings, dead: int) -> list[Row]:
    """10,000 dead tasks retried by id, then the ChargeJob ones found among all the dead."""
    listed = [m.decode() for m in client.zrange(K.dead, 0, 11_200)]
    ids = [m for m in listed if int(m[1:]) % 10 != 0][:10_000]  # EmailJob ones
    ms, done = timed(lambda: bulk.apply("retry", Q, settings, ids=ids), 1)
    rows = [("bulk retry of 10,000 dead, by id", ms, f"{done:,} ({done / ms * 1000:,.0f}/s)")]
    ms, done = timed(lambda: bulk.apply("retry", Q, settings, job="ChargeJob"), 1)
    rows.append((f"bulk retry of a job among {dead:,} dead", ms,
                 f"{done:,} ({done / ms * 1000:,.0f}/s)"))  # fmt: skip
    return rows


if __name__ == "__main__":
    main()
