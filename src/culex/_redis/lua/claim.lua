-- claim: promote due scheduled tasks, then take up to `limit` tasks from waiting
-- (lowest ready time first), lease them in pending, and return what a runner needs.
--
-- KEYS[1] waiting zset
-- KEYS[2] pending zset   score: lease deadline in ms
-- KEYS[3] scheduled zset
-- KEYS[4] dead zset
-- KEYS[5] task key prefix <prefix>:{<queue>}:task:   (the ids read from waiting are
--         unknown to the caller; the prefix keeps every key in the queue's slot)
-- KEYS[6] done list prefix <prefix>:{<queue>}:done:   (producers waiting for the end of a
--         task buried as broken are woken through <prefix><id>: see wait.lua)
-- ARGV[1] limit           how many tasks to claim at most (>= 0)
-- ARGV[2] lease_ms
-- ARGV[3] promote_limit   how many due scheduled tasks to promote at most
-- ARGV[4] dead_ttl_ms     for an id found in waiting without its hash
-- Returns: {now_us, next_due_ms or -1, task, task, ...} where each task is
--          {id, attempt, type, params, retry_count, max_retries, enqueue_time, trace}
--          (trace: the producer's trace context, "" for none).
-- An empty claim writes nothing. now_us is the server time in microseconds: a runner
-- times its wait for the next due task from it (ms would make it up to 1 ms late).

-- >>> include/wake.lua
-- A task whose hash has waited=1 (wait.lua) has producers blocked on its done list: one
-- element there wakes them all, since each waits with BLMOVE from the list to itself,
-- which puts the element back. The list expires with the task's hash (ttl ms).
local function wake(task_key, done_key, ttl)
  if redis.call('HDEL', task_key, 'waited') == 1 then
    redis.call('RPUSH', done_key, 'done')
    redis.call('PEXPIRE', done_key, ttl)
  end
end
-- <<< include/wake.lua

local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local limit = tonumber(ARGV[1])
local lease = tonumber(ARGV[2])
local promote_limit = tonumber(ARGV[3])
local dead_ttl = tonumber(ARGV[4])
if not (limit and lease and promote_limit and dead_ttl) then  -- (before any write)
  return redis.error_reply('ERR claim: ARGV[1] to ARGV[4] must be numbers')
end

local due = redis.call('ZRANGE', KEYS[3], '-inf', now, 'BYSCORE', 'LIMIT', 0,
  promote_limit, 'WITHSCORES')
for i = 1, #due, 2 do
  local id = due[i]
  redis.call('ZREM', KEYS[3], id)
  redis.call('ZADD', KEYS[1], due[i + 1], id)
  redis.call('HSET', KEYS[5] .. id, 'state', 'waiting')
end

-- A task that can never run goes to dead with its reason instead of vanishing or
-- breaking the whole claim: every check below comes before the first write for its id
-- (a script that errors half-way keeps the writes it made).
local function bury(key, id, reason)
  redis.call('HSET', key, 'id', id, 'state', 'dead', 'finished_at', now, 'last_error',
    'broken task: ' .. reason)
  redis.call('PEXPIRE', key, dead_ttl)
  redis.call('ZADD', KEYS[4], now, id)
  wake(key, KEYS[6] .. id, dead_ttl)
end

local reply = {t[1] * 1000000 + t[2], -1}
if limit > 0 then
  local popped = redis.call('ZPOPMIN', KEYS[1], limit)  -- {id, score, id, score, ...}
  local leases = {}  -- score, id pairs for one ZADD to pending
  for i = 1, #popped, 2 do
    local id = popped[i]
    local key = KEYS[5] .. id
    local f = redis.pcall('HMGET', key, 'type', 'params', 'retry_count', 'max_retries',
      'enqueue_time', 'attempt', 'trace')
    if f['err'] then
      -- The key holds another type. Not ours to delete: the value is kept beside the
      -- record, in the same slot.
      local kind = redis.call('TYPE', key)['ok']
      redis.call('RENAME', key, key .. ':wrongtype')
      bury(key, id, 'task key held a ' .. kind .. ', kept at ' .. key .. ':wrongtype')
    elseif f[1] == false and f[2] == false and f[6] == false then
      bury(key, id, 'no task hash for this id (or one without type, params and attempt)')
    elseif f[6] and (not string.match(f[6], '^%d+$') or #f[6] > 9) then
      bury(key, id, 'attempt is not a whole number')
    else
      local attempt = tonumber(f[6] or '0') + 1
      redis.call('HSET', key, 'attempt', attempt, 'state', 'pending', 'started_at', now)
      leases[#leases + 1] = now + lease
      leases[#leases + 1] = id
      reply[#reply + 1] = {id, attempt, f[1] or '', f[2] or '', f[3] or '0', f[4] or '',
        f[5] or '', f[7] or ''}
    end
  end
  for i = 1, #leases, 1000 do  -- unpack in slices: Lua's C stack is bounded
    redis.call('ZADD', KEYS[2], unpack(leases, i, math.min(i + 999, #leases)))
  end
end

local nxt = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
if nxt[2] then
  reply[2] = tonumber(nxt[2])
end
return reply
