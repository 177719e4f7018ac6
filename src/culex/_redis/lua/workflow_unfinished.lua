#!lua
-- workflow_unfinished: take the workflow operations under way whose producer has not
-- finished them in time (an enqueue, a cancel or a retry that spans slots: see
-- workflow_record.lua's `op`), to finish them in its stead. Each taken run is due again
-- lease_ms later, so a runner that dies while finishing one leaves it to another; the
-- finishing steps are idempotent. The producer adds its run before the operation's first
-- step, due when it should long be done, and removes it after the last.
--
-- KEYS[1] unfinished zset <prefix>:{workflows}:unfinished   (run ids, scored by when a
--         runner may finish the run's operation, ms)
-- ARGV[1] limit          how many at most, 1 .. 1000
-- ARGV[2] lease_ms       >= 1
-- Returns: the run ids taken.

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

local limit = argv_whole('workflow_unfinished', 1, 'limit', 1, 1000)
local lease = argv_whole('workflow_unfinished', 2, 'lease_ms', 1, MOST)
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local ids = redis.call('ZRANGE', KEYS[1], '-inf', now, 'BYSCORE', 'LIMIT', 0, limit)
for _, id in ipairs(ids) do
  redis.call('ZADD', KEYS[1], now + lease, id)
end
return ids
