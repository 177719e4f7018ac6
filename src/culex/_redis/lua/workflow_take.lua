#!lua
-- workflow_take: take the entries of a queue's outbox that are due (include/workflow.lua:
-- the ends of workflow nodes, not yet applied to their downstreams and runs), and lease
-- them: each is due again lease_ms later, so an entry whose runner dies before it applied
-- it is taken again by another. Applying an entry twice changes nothing
-- (workflow_resolve.lua, workflow_record.lua).
--
-- KEYS[1] outbox zset    <prefix>:{<queue>}:outbox   (each entry's hash is <KEYS[1]>:<id>)
-- ARGV[1] limit          how many entries at most, 1 .. 1000
-- ARGV[2] lease_ms       how long a taken entry is left to its taker, >= 1
-- Returns: {now_ms, entry, entry, ...}, each entry {id, field, value, field, value, ...}
--          (the hash's fields: run, node, down, state, result or error, at). An id whose
--          hash is gone leaves the outbox.
-- An error, and nothing written, for a bad limit or lease_ms.

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

local limit = argv_whole('workflow_take', 1, 'limit', 1, 1000)
local lease = argv_whole('workflow_take', 2, 'lease_ms', 1, MOST)
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local ids = redis.call('ZRANGE', KEYS[1], '-inf', now, 'BYSCORE', 'LIMIT', 0, limit)
local out = {now}
for _, id in ipairs(ids) do
  local f = redis.pcall('HGETALL', KEYS[1] .. ':' .. id)
  if f['err'] or #f == 0 then
    redis.call('ZREM', KEYS[1], id)
  else
    redis.call('ZADD', KEYS[1], now + lease, id)
    table.insert(f, 1, id)
    out[#out + 1] = f
  end
end
return out
