-- reclaim: pending tasks whose lease has expired lost their runner. Each counts as a
-- failed attempt ("lease expired (runner lost)"): it is scheduled again with the default
-- backoff (2 s x retry_count^2), or goes to dead when its retries are used up.
-- The lost runner's late report is refused, because the task is no longer pending
-- under its attempt.
--
-- KEYS[1] pending zset
-- KEYS[2] scheduled zset
-- KEYS[3] dead zset
-- KEYS[4] task key prefix <prefix>:{<queue>}:task:
-- ARGV[1] limit          how many expired tasks to reclaim at most
-- ARGV[2] dead_ttl_ms
-- ARGV[3] dead_max
-- Returns: {id, outcome, id, outcome, ...} with outcome "scheduled" or "dead".
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local ttl = tonumber(ARGV[2])
local reason = 'lease expired (runner lost)'
local out = {}
local ids = redis.call('ZRANGE', KEYS[1], '-inf', now, 'BYSCORE', 'LIMIT', 0, tonumber(ARGV[1]))
for _, id in ipairs(ids) do
  redis.call('ZREM', KEYS[1], id)
  local key = KEYS[4] .. id
  local f = redis.call('HMGET', key, 'retry_count', 'max_retries')
  local retries = (tonumber(f[1]) or 0) + 1
  local max_retries = tonumber(f[2]) or 4
  if retries <= max_retries then
    local due = now + 2000 * retries * retries
    redis.call('HSET', key, 'state', 'scheduled', 'retry_count', retries,
      'last_error', reason, 'failed_at', now, 'due_at', due)
    redis.call('ZADD', KEYS[2], due, id)
    out[#out + 1] = id
    out[#out + 1] = 'scheduled'
  else
    redis.call('HSET', key, 'state', 'dead', 'retry_count', retries, 'last_error', reason,
      'failed_at', now, 'finished_at', now)
    redis.call('PEXPIRE', key, ttl)
    redis.call('ZADD', KEYS[3], now, id)
    out[#out + 1] = id
    out[#out + 1] = 'dead'
  end
end
if #out > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now - ttl)
  redis.call('ZREMRANGEBYRANK', KEYS[3], 0, -(tonumber(ARGV[3]) + 1))
end
return out
