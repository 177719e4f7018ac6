#!lua
-- beat: a runner records itself in the runner registry (or, with ttl_ms 0, leaves it).
--
-- KEYS[1] runners zset <prefix>:{runners} (member: runner id, score: expiry ms)
-- KEYS[2] runner hash <prefix>:{runners}:runner:<id>
-- ARGV[1] runner id
-- ARGV[2] ttl_ms: how long the record lives without another beat; 0: remove it now
-- ARGV[3..] field, value pairs to set on the runner hash (host, pid, queues, tasks, ...)
-- Writes: the hash's fields and `beat` (server ms), its expiry; the runner's score in the
-- zset; drops members whose expiry has passed (runners that stopped beating); the zset
-- expires with its last member.
-- Returns: the server time in ms.
local ttl = tonumber(ARGV[2])
if not ttl then
  return redis.error_reply('ERR ttl_ms is not a number: ' .. tostring(ARGV[2]))
end
for i = 1, 2 do
  local kind = redis.call('TYPE', KEYS[i]).ok
  local wanted = i == 1 and 'zset' or 'hash'
  if kind ~= 'none' and kind ~= wanted then
    return redis.error_reply('WRONGTYPE ' .. KEYS[i] .. ' is a ' .. kind .. ', not a ' .. wanted)
  end
end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
if ttl <= 0 then
  redis.call('DEL', KEYS[2])
  redis.call('ZREM', KEYS[1], ARGV[1])
  return now
end
local fields = {'beat', now}
for i = 3, #ARGV do
  fields[#fields + 1] = ARGV[i]
end
redis.call('HSET', KEYS[2], unpack(fields))
redis.call('PEXPIRE', KEYS[2], ttl)
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], last[2])  -- the zset ends with its last record
return now
