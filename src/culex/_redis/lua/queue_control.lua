#!lua
-- queue_control: pause or resume a queue, or set its limits at run time (culex.pause, resume,
-- limit); read by every claim of the queue (claim.lua, KEYS[8]).
--
-- KEYS[1] control hash <prefix>:{<queue>}:control
-- KEYS[2] signal list  <prefix>:{<queue>}:signal   (a change wakes one idle runner, so a
--         resumed queue, or one whose limit was raised, starts at once)
-- ARGV[1..] pairs: field, value. Fields: paused ("1"), rate and rate_ms (set together:
--         the most starts in any window of rate_ms ms; rate "0": no rate limit),
--         concurrency (the most tasks pending at once; "0": no limit), and the same per
--         group: group_rate with group_rate_ms, group_concurrency. A value "" removes the
--         field: the claim then uses what the queue's job classes declare.
-- Returns: the control hash after the change, as field, value pairs (without the claim's
--          own mark, blocked). An error, and nothing written, for an unknown field, a
--          value that is not a whole number in 0 .. 2^42 - 1 (paused: only "1"), rate
--          without rate_ms, or rate_ms < 1 with a rate.
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

-- (left out here, not called by this script: argv_whole)
-- <<< include/numbers.lua

local known = {paused = true, rate = true, rate_ms = true, concurrency = true,
  group_rate = true, group_rate_ms = true, group_concurrency = true}
if #ARGV % 2 ~= 0 then
  return redis.error_reply('ERR queue_control: ARGV must be field, value pairs')
end
local given = {}
for i = 1, #ARGV, 2 do
  local field, value = ARGV[i], ARGV[i + 1]
  if not known[field] then
    return redis.error_reply('ERR queue_control: unknown field ' .. field)
  end
  if value ~= '' and not whole(value, 0, MOST) then
    return redis.error_reply('ERR queue_control: ' .. field .. ' must be a whole number in 0 .. '
      .. '4398046511103 (2^42 - 1), got ' .. string.sub(value, 1, 40))
  end
  if field == 'paused' and value ~= '' and value ~= '1' then
    return redis.error_reply('ERR queue_control: paused is "1" or ""')
  end
  given[field] = value
end
for _, name in ipairs({'rate', 'group_rate'}) do
  local count, window = given[name], given[name .. '_ms']
  if (count == nil) ~= (window == nil) or (count == '') ~= (window == '') then
    return redis.error_reply('ERR queue_control: ' .. name .. ' and ' .. name .. '_ms are set together')
  end
  if count and count ~= '' and count ~= '0' and tonumber(window) < 1 then
    return redis.error_reply('ERR queue_control: ' .. name .. '_ms must be >= 1 with a ' .. name)
  end
end
for i = 1, #ARGV, 2 do
  if ARGV[i + 1] == '' then
    redis.call('HDEL', KEYS[1], ARGV[i])
  else
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
  end
end
if redis.call('LLEN', KEYS[2]) == 0 then
  redis.call('RPUSH', KEYS[2], '1')
end
local out = {}
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  if all[i] ~= 'blocked' then
    out[#out + 1] = all[i]
    out[#out + 1] = all[i + 1]
  end
end
return out
