-- complete: pending tasks succeeded; store their results and let their hashes expire.
-- One call reports a whole batch of one queue (a runner sends what finished meanwhile).
--
-- KEYS[1] pending zset
-- KEYS[2] task key prefix <prefix>:{<queue>}:task:   (one hash per id below; the prefix
--         keeps every key in the queue's slot)
-- KEYS[3] periodic record prefix <prefix>:{<queue>}:periodic:   (a task of a periodic job,
--         marked periodic=1 in its hash, writes last_finished_at and last_outcome there)
-- ARGV[1] ttl_ms          successful_job_ttl in ms
-- ARGV[2..] triples: id, attempt, result (JSON text of perform's return value)
--         attempt is the one the runner was handed: it fences stale runners
-- Returns: the ids whose report was refused (not pending under that attempt: the lease
--          was lost and the task handed out again, or it is gone, or its key holds
--          another type); {} when all landed.
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local ttl = tonumber(ARGV[1])
local refused = {}
local done = {}
for i = 2, #ARGV, 3 do
  local id = ARGV[i]
  local key = KEYS[2] .. id
  -- (pcall: a key of another type is refused like a stale report; an error here would
  -- stop the batch after the writes of the ids before it)
  local f = redis.pcall('HMGET', key, 'attempt', 'state', 'periodic', 'type')
  if not f['err'] and f[1] == ARGV[i + 1] and f[2] == 'pending' then
    done[#done + 1] = id
    redis.call('HSET', key, 'state', 'succeeded', 'result', ARGV[i + 2], 'finished_at', now)
    redis.call('PEXPIRE', key, ttl)
    if f[3] == '1' then
      -- (pcall: a record key holding another type must not stop the tasks' own reports)
      redis.pcall('HSET', KEYS[3] .. f[4], 'last_finished_at', now, 'last_outcome', 'succeeded')
    end
  else
    refused[#refused + 1] = id
  end
end
for i = 1, #done, 1000 do  -- unpack in slices: Lua's C stack is bounded
  redis.call('ZREM', KEYS[1], unpack(done, i, math.min(i + 999, #done)))
end
return refused
