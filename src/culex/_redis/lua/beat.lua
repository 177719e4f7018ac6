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
-- Returns: the server time in ms. An error, and nothing written, when ttl_ms is not a
-- whole number in 0 .. 2^42 - 1.

-- >>> include/numbers.lua
-- MOST = 2^42 - 1, the largest whole number a script takes where its header says no other
-- bound: a ready time (ms since the epoch, below 2^42: include/priority.lua), a duration in
-- ms, a count. Such a number, and the sum of two, has at most 13 digits: Lua's own number
-- to text conversion (14 digits) writes it back exactly, into a field, a score or a TTL.
local MOST = 4398046511103

-- A Lua number given to redis.call is written out by the server: Redis before 7.2 does it
-- with printf('%.17g'), a few thousand instructions a number (a tenth of a one-call
-- enqueue's script), where Valkey and Redis 7.2 on write a whole number as an integer for
-- next to nothing. So, on an older server, the hot scripts give their commands the time as
-- text cut from TIME's own digits (t[1] .. string.sub('000' .. string.sub(t[2], 1, -4),
-- -3) is t[1] * 1000 + math.floor(t[2] / 1000), written out), and the whole numbers they
-- write as such text. (Written out where needed, not as a function: a closure made per
-- call costs the garbage collector more than the expression.)
local NUMBERS_AS_TEXT = redis.REDIS_VERSION_NUM < 0x070200

-- `text` (an ARGV or a hash field) as a whole number in lo .. hi, or nil. Only decimal
-- digits, with a '-' before them, make one: Lua's tonumber also takes 'nan', 'inf',
-- '0x10', ' 5 ', '1e3' and fractions.
local function whole(text, lo, hi)
  if type(text) ~= 'string' or #text > 16 or not string.match(text, '^%-?%d+$') then
    return nil
  end
  local n = tonumber(text)
  if n < lo or n > hi then return nil end
  return n
end

-- ARGV[i], the number `name` of `script`, as a whole number in lo .. hi; "" or no ARGV[i]
-- stands for `absent` when that is not nil (false: no number). Anything else stops the
-- script with an error that names the script, the position and the rule. Every script
-- checks its ARGV this way before its first write, so a refused call writes nothing.
local function argv_whole(script, i, name, lo, hi, absent)
  local text = ARGV[i]
  if absent ~= nil and (text == nil or text == '') then return absent end
  local n = whole(text, lo, hi)
  if not n then
    error({err = string.format('ERR %s: ARGV[%d] %s must be a whole number in %.0f .. %.0f%s,'
      .. ' got "%s"', script, i, name, lo, hi, absent ~= nil and ' (or "")' or '',
      string.sub(tostring(text), 1, 40))})
  end
  return n
end
-- <<< include/numbers.lua

local ttl = argv_whole('beat', 2, 'ttl_ms', 0, MOST)
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
