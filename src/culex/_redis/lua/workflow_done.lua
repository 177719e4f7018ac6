#!lua
-- workflow_done: a runner applied these outbox entries (workflow_take.lua) to their
-- downstreams and runs: they leave the outbox. Each is named with the `at` it was taken
-- with, so an entry written anew since (the node ran again and ended again) stays. The
-- node's copies of its upstreams' ends (:upstream:<id>) then expire with its hash.
--
-- Or, with ARGV[1] "aside", one entry that cannot be applied (its state is no end, its
-- `down` is no list of [queue, id] pairs) is set aside with its reason: its hash moves to
-- <prefix>:{<queue>}:aside:<id> with a field `reason`, and the id goes from the outbox to
-- <prefix>:{<queue>}:aside (a sorted set scored by when, ms); both are kept ttl_ms, so the
-- entries after it are applied and it is not taken again.
--
-- KEYS[1] outbox zset    <prefix>:{<queue>}:outbox
-- KEYS[2] task key prefix <prefix>:{<queue>}:task:
-- ARGV[1..] pairs: id, at
--   or: "aside", id, at, reason, ttl_ms (>= 1)
-- Returns: how many entries left the outbox.
-- An error, and nothing written, for an odd number of values or a bad ttl_ms.

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

local base = string.sub(KEYS[2], 1, #KEYS[2] - 5)
if ARGV[1] == 'aside' then
  local ttl = argv_whole('workflow_done', 5, 'ttl_ms', 1, MOST)
  local id, entry = ARGV[2], KEYS[1] .. ':' .. ARGV[2]
  local at = redis.pcall('HGET', entry, 'at')
  if type(at) == 'table' or not at or at ~= ARGV[3] then return 0 end
  local t = redis.call('TIME')
  local now = t[1] * 1000 + math.floor(t[2] / 1000)
  local aside = base .. 'aside'
  redis.call('RENAME', entry, aside .. ':' .. id)
  redis.call('HSET', aside .. ':' .. id, 'reason', ARGV[4])
  redis.call('PEXPIRE', aside .. ':' .. id, ttl)
  redis.pcall('ZADD', aside, now, id)
  redis.pcall('ZREMRANGEBYSCORE', aside, '-inf', now - ttl)
  redis.pcall('PEXPIRE', aside, ttl)
  return redis.call('ZREM', KEYS[1], id)
end
if #ARGV % 2 ~= 0 then
  return redis.error_reply('ERR workflow_done takes pairs: id, at')
end
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
