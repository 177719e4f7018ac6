#!lua
-- progress: a running task's job reports how far its attempt has got (job.progress()).
-- Stored on the task's hash, timed by the server's clock, and kept after the task ends
-- (the last progress reported stays readable, as the task's other fields do).
--
-- KEYS[1] task hash
-- ARGV[1] attempt         fences stale runners: only the attempt that holds the lease
-- ARGV[2] fraction        a number from 0 to 1
-- ARGV[3] message         text of at most 4000 bytes, or "" for none
-- Returns: 1 when stored; 0 when refused (the task is not pending under that attempt:
--          its lease was lost, or it has ended). An error, and nothing written, when
--          fraction is not a number from 0 to 1 or message is longer.
local fraction = tonumber(ARGV[2])
if not fraction or fraction ~= fraction or fraction < 0 or fraction > 1 then
  return redis.error_reply('ERR progress: fraction must be a number from 0 to 1, got '
    .. tostring(ARGV[2]))
end
if not ARGV[3] or #ARGV[3] > 4000 then
  return redis.error_reply('ERR progress: message must be text of at most 4000 bytes')
end
local f = redis.call('HMGET', KEYS[1], 'attempt', 'state')
if f[1] ~= ARGV[1] or f[2] ~= 'pending' then
  return 0
end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('HSET', KEYS[1], 'progress', tostring(fraction), 'progress_message', ARGV[3],
  'progress_at', now)
return 1
