#!lua
-- periodic_pause: pause or resume a periodic job at run time. A paused job enqueues
-- nothing (schedule.lua answers "paused" for its slots and its triggers) until resumed.
--
-- KEYS[1] periodic record hash <prefix>:{<queue>}:periodic:<type>
-- ARGV[1] action         "pause" or "resume"
-- ARGV[2] known          "1": the caller has the job's class: a job with no record yet (no
--                        scheduler has seen it) gets one, with the pairs below; otherwise
--                        a job with no record is "unknown" and nothing changes
-- ARGV[3..] pairs        field, value written on the record with a pause, for readers that
--                        do not have the job's class: `job`, `queue`, `schedule`, `timezone`
-- Pause writes paused = "1" and paused_at (ms, the server's clock), and takes the record's
-- expiry away (a pause lasts until it is resumed, however long no slot renews the record).
-- Resume of a paused job removes both, sets decided_slot to now when it is earlier (the
-- slots that fell during the pause are passed over, not caught up: the next one runs), and
-- gives the record an expiry of 7 days (schedule.lua's KEEP_MS; the next slot renews it).
-- Resume of a job that is not paused changes nothing.
-- Returns: "paused", "resumed" or "unknown". An error, and nothing written, for another
-- action or pairs that are not pairs; a record key of another type: the server's error.
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

local KEEP_MS = 7 * 24 * 3600 * 1000
local action = ARGV[1]
if action ~= 'pause' and action ~= 'resume' then
  return redis.error_reply('ERR periodic_pause: ARGV[1] must be "pause" or "resume"')
end
if (#ARGV - 2) % 2 ~= 0 then
  return redis.error_reply('ERR periodic_pause: the record fields after ARGV[2] come in pairs')
end
local exists = redis.call('EXISTS', KEYS[1]) == 1
if not exists and ARGV[2] ~= '1' then
  return 'unknown'
end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
if action == 'pause' then
  local fields = {'paused', '1', 'paused_at', now}
  for i = 3, #ARGV do
    fields[#fields + 1] = ARGV[i]
  end
  redis.call('HSET', KEYS[1], unpack(fields))
  redis.call('PERSIST', KEYS[1])
  return 'paused'
end
if redis.call('HGET', KEYS[1], 'paused') == '1' then
  -- (a decided_slot that is not a whole number in 0 .. MOST counts as 0, as in schedule.lua)
  local decided = whole(redis.call('HGET', KEYS[1], 'decided_slot'), 0, MOST) or 0
  redis.call('HDEL', KEYS[1], 'paused', 'paused_at')
  redis.call('HSET', KEYS[1], 'decided_slot', math.max(decided, now))
  redis.call('PEXPIRE', KEYS[1], KEEP_MS)
end
return 'resumed'
