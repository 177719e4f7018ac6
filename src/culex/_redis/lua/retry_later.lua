-- retry_later: a pending task's job asked to run again later (culex.RetryLater: a remote
-- service said "slow down"). The task goes to scheduled, due after the delay, WITHOUT
-- counting a failed attempt: retry_count, last_error and failed_at stay as they were, and
-- the counters (include/stats.lua) count nothing, since the attempt neither succeeded nor
-- failed. It records retry_later_at (now) and adds 1 to retry_later_count.
--
-- KEYS[1] task hash
-- KEYS[2] pending zset
-- KEYS[3] scheduled zset
-- ARGV[1] id
-- ARGV[2] attempt         fences stale runners, as in fail
-- ARGV[3] delay_ms        a whole number >= 0: the task is due that long after now
-- Returns: "scheduled"; 0 when refused (stale attempt or not pending). An error, and
--          nothing written, when delay_ms is not a whole number >= 0.
local delay = tonumber(ARGV[3])
if not delay or delay < 0 or delay ~= math.floor(delay) or delay == math.huge then
  return redis.error_reply('ERR retry_later: delay_ms must be a whole number >= 0, got '
    .. tostring(ARGV[3]))
end
local f = redis.call('HMGET', KEYS[1], 'attempt', 'state')
if f[1] ~= ARGV[2] or f[2] ~= 'pending' then
  return 0
end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[1], 'state', 'scheduled', 'due_at', now + delay, 'retry_later_at', now)
redis.call('HINCRBY', KEYS[1], 'retry_later_count', 1)
redis.call('ZADD', KEYS[3], now + delay, ARGV[1])
return 'scheduled'
