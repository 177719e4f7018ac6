-- retry_dead: put dead tasks back in waiting, with their retries restored. A retried task
-- goes to the back of the line (ready now) and must no longer expire. Its `attempt` is
-- kept: attempt numbers only grow, so a report from a run before its death stays refused.
--
-- KEYS[1] dead zset
-- KEYS[2] waiting zset
-- KEYS[3] signal list
-- KEYS[4] task key prefix <prefix>:{<queue>}:task:   (the ids read from dead are unknown to
--         the caller; the prefix keeps every key in the queue's slot)
-- ARGV[1] limit           how many ids to look at at most (> 0)
-- ARGV[2..] ids           the ids to retry; none: the oldest `limit` ids in dead
-- Returns: {retried, skipped}: two arrays of ids. An id is retried when it is in dead and
--          its hash says state "dead": it leaves dead, its hash is persisted, state
--          "waiting", retry_count 0, retried_at and due_at = now, finished_at removed
--          (last_error, failed_at and attempt are kept), and it is added to waiting with
--          score now. Any other id is skipped and changes nothing, except an id in dead
--          whose hash is gone (expired): it can never run, so it is removed from dead.
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local limit = tonumber(ARGV[1])
local ids = {}
if #ARGV > 1 then
  for i = 2, math.min(#ARGV, limit + 1) do
    ids[#ids + 1] = ARGV[i]
  end
else
  ids = redis.call('ZRANGE', KEYS[1], 0, limit - 1)
end

local retried = {}
local skipped = {}
for _, id in ipairs(ids) do
  local key = KEYS[4] .. id
  if not redis.call('ZSCORE', KEYS[1], id) then
    skipped[#skipped + 1] = id
  elseif redis.call('EXISTS', key) == 0 then
    redis.call('ZREM', KEYS[1], id)
    skipped[#skipped + 1] = id
  elseif redis.pcall('HGET', key, 'state') ~= 'dead' then  -- (a key of another type: an error)
    skipped[#skipped + 1] = id
  else
    redis.call('ZREM', KEYS[1], id)
    redis.call('PERSIST', key)
    redis.call('HSET', key, 'state', 'waiting', 'retry_count', 0, 'retried_at', now,
      'due_at', now)
    redis.call('HDEL', key, 'finished_at')
    redis.call('ZADD', KEYS[2], now, id)
    retried[#retried + 1] = id
  end
end
-- one token is enough to wake a runner; more would only make idle runners spin
if #retried > 0 and redis.call('LLEN', KEYS[3]) == 0 then
  redis.call('RPUSH', KEYS[3], '1')
end
return {retried, skipped}
