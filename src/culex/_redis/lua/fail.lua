-- fail: a pending task's attempt failed; schedule its retry, or bury it in dead.
--
-- KEYS[1] task hash
-- KEYS[2] pending zset
-- KEYS[3] scheduled zset
-- KEYS[4] dead zset
-- KEYS[5] periodic record prefix <prefix>:{<queue>}:periodic:   (a task of a periodic job
--         that dies writes last_finished_at and last_outcome to its record, as in complete)
-- ARGV[1] id
-- ARGV[2] attempt         fences stale runners, as in complete
-- ARGV[3] error           the reason, stored as last_error
-- ARGV[4] retry_delay_ms  >= 0: retry after this delay; -1: no retry, the task goes to dead
-- ARGV[5] dead_ttl_ms     failed_job_ttl in ms: the hash expires, and dead is trimmed by age
-- ARGV[6] dead_max        dead keeps at most this many ids (the oldest go first)
-- Returns: "scheduled" or "dead"; 0 when refused (stale attempt or not pending).
local f = redis.call('HMGET', KEYS[1], 'attempt', 'state', 'periodic', 'type')
if f[1] ~= ARGV[2] or f[2] ~= 'pending' then
  return 0
end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HINCRBY', KEYS[1], 'retry_count', 1)
local delay = tonumber(ARGV[4])
if delay >= 0 then
  redis.call('HSET', KEYS[1], 'state', 'scheduled', 'last_error', ARGV[3],
    'failed_at', now, 'due_at', now + delay)
  redis.call('ZADD', KEYS[3], now + delay, ARGV[1])
  return 'scheduled'
end
local ttl = tonumber(ARGV[5])
to_dead(KEYS[1], KEYS[4], ARGV[1], ARGV[3], now, ttl)
trim_dead(KEYS[4], now, ttl, tonumber(ARGV[6]))
if f[3] == '1' then
  -- (pcall: a record key holding another type must not stop the task's own report)
  redis.pcall('HSET', KEYS[5] .. f[4], 'last_finished_at', now, 'last_outcome', 'dead')
end
return 'dead'
