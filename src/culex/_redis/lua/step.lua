#!lua
-- step: record one step of a durable task (culex's `self.step(name, fn, ...)`): its result,
-- kept with the task, so that a later attempt of the task (a retry, a reclaim after a
-- crash, a resume after a sleep or a signal) gets it back without running the step again.
-- Fenced: only the attempt that holds the task (pending, under that attempt) records; a
-- stale attempt's record is refused, and that attempt goes no further. Steps are recorded
-- in order: the hash's `steps` counts them, each is the field step:<index> (0, 1, ...).
--
-- KEYS[1] task hash      <prefix>:{<queue>}:task:<id>
-- ARGV[1] attempt        the attempt recording it
-- ARGV[2] index          the step's place in perform, from 0: the number of steps the
--                        attempt has passed (recorded or replayed) before it
-- ARGV[3] name           the step's name, unique within the task (1 to 200 bytes)
-- ARGV[4] result         the step's result, JSON text
-- ARGV[5] max_steps      the most steps a task records (sleeps and signals count)
-- ARGV[6] max_step_bytes the largest result a step records
-- ARGV[7] max_task_bytes the most bytes a task's records hold in all
-- Returns: {"recorded"}; {"stale"} (this attempt does not hold the task: nothing written);
--          {"conflict", record} (a record is at that index already: the JSON of it, for
--          the caller to compare: code changed under a running task; or a receive waits
--          there, the hash's awaiting: {name <awaiting>, kind "receive", awaiting true}
--          as suspend.lua replies); {"limit", what}
--          ("steps", "step" or "task": nothing written).
-- An error, and nothing written, for a bad number or name.

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

local attempt = argv_whole('step', 1, 'attempt', 1, MOST)
local index = argv_whole('step', 2, 'index', 0, MOST)
local most = argv_whole('step', 5, 'max_steps', 1, MOST)
local step_bytes = argv_whole('step', 6, 'max_step_bytes', 1, MOST)
local task_bytes = argv_whole('step', 7, 'max_task_bytes', 1, MOST)
local name = ARGV[3]
if name == '' or #name > 200 then
  return redis.error_reply('ERR step: ARGV[3] name takes 1 to 200 bytes')
end
local f = redis.pcall('HMGET', KEYS[1], 'state', 'attempt', 'steps', 'steps_bytes', 'awaiting')
if f['err'] or f[1] ~= 'pending' or f[2] ~= tostring(attempt) then
  return {'stale'}
end
local count = whole(f[3], 0, MOST) or 0
if index < count then
  return {'conflict', redis.call('HGET', KEYS[1], 'step:' .. index) or ''}
end
if index > count then
  return redis.error_reply('ERR step: index ' .. index .. ' after ' .. count .. ' steps')
end
if f[5] and f[5] ~= '' then  -- a receive waits at this index (suspend.lua)
  return {'conflict', cjson.encode({name = f[5], kind = 'receive', awaiting = true})}
end
local size = #ARGV[4]
local total = (whole(f[4], 0, MOST) or 0) + size
if count >= most then return {'limit', 'steps'} end
if size > step_bytes then return {'limit', 'step'} end
if total > task_bytes then return {'limit', 'task'} end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('HSET', KEYS[1], 'step:' .. index,
  cjson.encode({name = name, kind = 'step', at = now, value = ARGV[4]}),
  'steps', count + 1, 'steps_bytes', total)
return {'recorded'}
