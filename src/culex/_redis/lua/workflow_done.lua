#!lua
-- workflow_done: a runner applied these outbox entries (workflow_take.lua) to their
-- downstreams and runs: they leave the outbox. Each is named with the `at` it was taken
-- with, so an entry written anew since (the node ran again and ended again) stays. The
-- node's copies of its upstreams' ends (:upstream:<id>) then expire with its hash.
--
-- KEYS[1] outbox zset    <prefix>:{<queue>}:outbox
-- KEYS[2] task key prefix <prefix>:{<queue>}:task:
-- ARGV[1..] pairs: id, at
-- Returns: how many entries left the outbox.

if #ARGV % 2 ~= 0 then
  return redis.error_reply('ERR workflow_done takes pairs: id, at')
end
local base = string.sub(KEYS[2], 1, #KEYS[2] - 5)
local removed = 0
for i = 1, #ARGV, 2 do
  local id = ARGV[i]
  local entry = KEYS[1] .. ':' .. id
  local at = redis.pcall('HGET', entry, 'at')
  if type(at) ~= 'table' and (at == ARGV[i + 1] or not at) then
    redis.call('DEL', entry)
    removed = removed + redis.call('ZREM', KEYS[1], id)
    local copies = base .. 'upstream:' .. id
    local ttl = redis.call('PTTL', KEYS[2] .. id)
    if ttl > 0 then
      redis.call('PEXPIRE', copies, ttl)
    elseif ttl == -2 then
      redis.call('DEL', copies)
    end
  end
end
return removed
