#!lua
-- workflow_rearm: a dead node of a retried workflow run (workflow_record.lua's retry) runs
-- again: it leaves dead, its attempts count from 0 again, and it waits for the upstreams
-- that are retried with it (blocked), or, when it waits for none, goes to waiting. The
-- copies of those upstreams' ends are forgotten: their new ends will come, and an outbox
-- entry of its own old end not applied yet is dropped. The retry's number fences it: a
-- node rearmed by this retry already is left alone, so a runner that finishes a retry its
-- producer left half-done rearms nothing twice.
--
-- KEYS[1] task key prefix <prefix>:{<queue>}:task:
-- KEYS[2] waiting zset   <prefix>:{<queue>}:waiting
-- KEYS[3] signal list    <prefix>:{<queue>}:signal
-- KEYS[4] dead zset      <prefix>:{<queue>}:dead
-- ARGV[1] id             the node's task id
-- ARGV[2] run            its run's id
-- ARGV[3] retry          the retry's number (workflow_record.lua)
-- ARGV[4..] the ids of the upstreams it waits for again
-- Returns: "waiting", "blocked", "skipped" (not a dead node of that run, or rearmed by
--          this retry already) or "gone" (its hash expired).

-- >>> include/priority.lua
-- waiting is one sorted set: a task's score is ready_ms - priority * 2^42, so ZPOPMIN takes
-- the highest priority first and, within one priority, the earliest ready (2^42 ms is the
-- year 2109; scores stay whole numbers well below 2^53, where doubles are exact). Priority
-- 0, every task's without a `priority` field, scores its ready time as before priorities.
-- A priority that is not a whole number in -100 .. 100 counts as 0: a script must not stop
-- half-way on a field a foreign producer wrote. '%.0f': Lua's own number to text conversion
-- may round a number of 15 or more digits; a ready time alone (13 digits, below 2^42) it
-- writes exactly, so the common case, no priority, skips the formatting.
local function waiting_score(ready_ms, priority)
  if (priority == nil or priority == 0) and type(ready_ms) == 'number' then
    return ready_ms
  end
  local p = tonumber(priority)
  if not p or p ~= math.floor(p) or p < -100 or p > 100 then p = 0 end
  return string.format('%.0f', ready_ms - p * 4398046511104)
end
-- <<< include/priority.lua

local key = KEYS[1] .. ARGV[1]
local f = redis.pcall('HMGET', key, 'state', 'run', 'retry_epoch', 'priority')
if f['err'] then return 'skipped' end
if not f[1] then return 'gone' end
if f[2] ~= ARGV[2] or f[1] ~= 'dead' or f[3] == ARGV[3] then return 'skipped' end
local base = string.sub(KEYS[1], 1, #KEYS[1] - 5)
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('ZREM', KEYS[4], ARGV[1])
redis.call('ZREM', base .. 'outbox', ARGV[1])  -- (its old end, if not applied yet, is void)
redis.call('DEL', base .. 'outbox:' .. ARGV[1])
redis.call('HDEL', key, 'finished_at', 'cancel_requested', 'stalls', 'stalled_at')
redis.call('HSET', key, 'retry_count', 0, 'retry_epoch', ARGV[3], 'retried_at', now)
redis.call('PERSIST', key)
local copies = base .. 'upstream:' .. ARGV[1]
redis.call('PERSIST', copies)
local waits = base .. 'waits:' .. ARGV[1]
redis.call('DEL', waits)
for i = 4, #ARGV do
  redis.call('HDEL', copies, ARGV[i])
  redis.call('SADD', waits, ARGV[i])
end
if #ARGV >= 4 then
  redis.call('HSET', key, 'state', 'blocked')
  return 'blocked'
end
redis.call('HSET', key, 'state', 'waiting', 'due_at', now)
redis.call('ZADD', KEYS[2], waiting_score(now, f[4]), ARGV[1])
if redis.call('LLEN', KEYS[3]) == 0 then
  redis.call('RPUSH', KEYS[3], '1')
end
return 'waiting'
