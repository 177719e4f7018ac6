"""Many queues for bench/dashboard.py: ``count`` queues of ``per`` waiting tasks each (and a
dead one in every tenth), each registered in ``<prefix>:queues``, written by a bench-only
Lua loop in the server (the wire format of docs/wire-format.md)."""

from __future__ import annotations

import redis

from culex._redis.keys import queues_key

T0 = 1_700_000_000_000

FILL = """
local prefix, first, count, per, t0 = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]),
  tonumber(ARGV[4]), tonumber(ARGV[5])
for q = first, first + count - 1 do
  local name = string.format('q%06d', q)
  local base = prefix .. ':{' .. name .. '}:'
  local scores = {}
  for i = 1, per do
    local id = string.format('%s-%04d', name, i)
    redis.call('HSET', base .. 'task:' .. id, 'id', id, 'type', 'EmailJob', 'queue', name,
      'state', 'waiting', 'params', '{"n": ' .. i .. '}', 'enqueue_time', t0 + i,
      'due_at', t0 + i, 'retry_count', 0, 'attempt', 0, 'max_retries', 4)
    scores[#scores + 1] = t0 + i
    scores[#scores + 1] = id
  end
  redis.call('ZADD', base .. 'waiting', unpack(scores))
  if q % 10 == 0 then
    local id = name .. '-dead'
    redis.call('HSET', base .. 'task:' .. id, 'id', id, 'type', 'ChargeJob', 'queue', name,
      'state', 'dead', 'params', '{}', 'enqueue_time', t0, 'failed_at', t0,
      'last_error', 'ValueError: the bank said no', 'retry_count', 4, 'attempt', 5)
    redis.call('ZADD', base .. 'dead', t0, id)
  end
  redis.call('SADD', KEYS[1], name)
end
return count
"""


def fill_queues(client: redis.Redis, count: int, per: int, prefix: str = "culex") -> None:
    """``count`` queues named q000000.. of ``per`` waiting tasks each."""
    script = client.register_script(FILL)
    step = max(1, 100_000 // max(per, 1))
    for first in range(0, count, step):
        script(keys=[queues_key(prefix)], args=[prefix, first, min(step, count - first), per, T0])
