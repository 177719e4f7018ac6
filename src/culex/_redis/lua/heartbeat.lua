#!lua flags=allow-oom
-- heartbeat: renew the leases of a runner's pending tasks in one queue. Flagged allow-oom
-- (the one script that is): it only moves a deadline of an id already in pending, so a
-- server out of memory (maxmemory reached) still renews the leases of tasks whose reports
-- it refuses meanwhile, and none of them is reclaimed for the outage.
--
-- KEYS[1] pending zset
-- KEYS[2] task key prefix <prefix>:{<queue>}:task:
-- ARGV[1] lease_ms
-- ARGV[2..] pairs of id, attempt
-- Returns: the ids whose lease was NOT renewed (lost: not pending under that attempt).
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local deadline = now + tonumber(ARGV[1])
local lost = {}
for i = 2, #ARGV, 2 do
  local id = ARGV[i]
  local f = redis.call('HMGET', KEYS[2] .. id, 'attempt', 'state')
  if f[1] == ARGV[i + 1] and f[2] == 'pending' then
    redis.call('ZADD', KEYS[1], 'XX', deadline, id)
  else
    lost[#lost + 1] = id
  end
end
return lost
