#!lua
-- workflow_discard: delete the nodes of a discarded workflow run (workflow_record.lua's
-- discard) that live on one queue. Only a node still blocked and of that run goes: a
-- discarded run never started, so none of its nodes ran.
--
-- KEYS[1] task key prefix <prefix>:{<queue>}:task:
-- ARGV[1] run            the run's id
-- ARGV[2..] the node ids
-- Returns: how many nodes were deleted.

local base = string.sub(KEYS[1], 1, #KEYS[1] - 5)
local deleted = 0
for i = 2, #ARGV do
  local id = ARGV[i]
  local f = redis.pcall('HMGET', KEYS[1] .. id, 'run', 'state')
  if not f['err'] and f[1] == ARGV[1] and f[2] == 'blocked' then
    deleted = deleted + redis.call('DEL', KEYS[1] .. id)
    redis.call('DEL', base .. 'waits:' .. id, base .. 'upstream:' .. id)
  end
end
return deleted
