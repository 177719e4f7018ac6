-- release: hand a pending task back to waiting at once without counting a failure
-- (a runner stopping gracefully). Its ready time is kept so it keeps its place in line.
--
-- KEYS[1] task hash
-- KEYS[2] pending zset
-- KEYS[3] waiting zset
-- KEYS[4] signal list
-- ARGV[1] id
-- ARGV[2] attempt         fences stale runners, as in complete
-- Returns: 1 when released; 0 when refused (stale attempt or not pending, or its cancel
--          was requested: cancel.lua. Such a task must not run again: its runner ends it
--          with fail, or, when it cannot, its lease runs out and reclaim sends it to dead).
local f = redis.call('HMGET', KEYS[1], 'attempt', 'state', 'enqueue_time', 'due_at',
  'cancel_requested')
if f[1] ~= ARGV[2] or f[2] ~= 'pending' or f[5] then
  return 0
end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[1], 'state', 'waiting')
redis.call('ZADD', KEYS[3], tonumber(f[4] or f[3] or 0) or 0, ARGV[1])
if redis.call('LLEN', KEYS[4]) == 0 then
  redis.call('RPUSH', KEYS[4], '1')
end
return 1
