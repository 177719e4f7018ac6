#!lua
-- suspend: a durable task sleeps, or waits for a signal, without holding a runner or a
-- lease (culex's `self.sleep(...)` and `self.receive(name, timeout=...)`). The attempt
-- that holds the task (fenced) ends here, with no failure counted: the task goes to
-- scheduled, due when it wakes, and its next attempt runs perform from the top, replaying
-- its recorded steps. The sleep itself is recorded as a step (step:<index>, as step.lua
-- records), so the next attempt passes it; a receive is recorded once it has its signal
-- (or ran out of time), not while it waits.
--
-- sleep: the record {name "sleep", kind "sleep", at, until} is written; the task is due at
--   now + delay_ms.
-- receive: the task's hash keeps the signals sent to it, signal:<name> (signal.lua). When
--   signal:<name> is there, it is taken (the field goes, and signal.lua's counts of
--   kept signals, signals_kept and signals_kept_bytes, lose it), recorded {name, kind
--   "receive", at, value}, and the attempt goes on: the reply is {"signal", value}. When
--   the wait's end (awaiting_until, set by the first wait: now + delay_ms, or the latest
--   time culex takes when delay_ms is "") has passed, {name, kind "receive", at, timeout
--   true} is recorded and the reply is {"timeout"}. Else the task waits in scheduled until
--   then, its hash saying awaiting <name>: signal.lua moves it to waiting at once.
--
-- KEYS[1] task hash      <prefix>:{<queue>}:task:<id>
-- KEYS[2] pending zset   <prefix>:{<queue>}:pending
-- KEYS[3] scheduled zset <prefix>:{<queue>}:scheduled
-- KEYS[4] control hash   <prefix>:{<queue>}:control   (a slot freed under the queue's
--         concurrency limit wakes a runner: include/unblock.lua)
-- KEYS[5] signal list    <prefix>:{<queue>}:signal
-- KEYS[6] groups prefix  <prefix>:{<queue>}:groups:   (a task that ran as one of its
--         group's frees its place: include/groups.lua)
-- ARGV[1] attempt        the attempt that suspends
-- ARGV[2] index          the place of the sleep or receive among perform's steps, from 0
-- ARGV[3] kind           "sleep" or "receive"
-- ARGV[4] name           the signal's name (receive; 1 to 200 bytes), "" for a sleep
-- ARGV[5] delay_ms       how long to sleep, or to wait for the signal ("": for ever)
-- ARGV[6] max_steps      the most steps a task records
-- Returns: {"suspended", until_ms}; {"signal", value}; {"timeout"}; {"stale"} (nothing
--          written); {"cancel"} (a cancel was asked for: the attempt does not suspend,
--          nothing written); {"conflict", record} (a record is at that index; or the
--          task waits for another signal at that index, its hash's awaiting: then the
--          record is {name <awaiting>, kind "receive", awaiting true}, as a receive's
--          wait holds its place: code changed under a waiting task); {"limit", "steps"}.
-- An error, and nothing written, for a bad number, kind or name.

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

-- >>> include/groups.lua
-- A task enqueued with a group (its hash's `group`) waits in its group's own ready set
-- <groups>g:<group>, not in waiting; <groups>ready lists every grouped ready task (the
-- queue's counts and listings of waiting add it), and the ring <groups>ring holds the
-- groups that have ready tasks, scored by their turn (µs): claim takes one task from the
-- group whose turn is first, then moves it to the back. <groups>running counts each group's
-- tasks in pending. groups is the KEY <prefix>:{<queue>}:groups: (nil: a caller that passes
-- none, written before groups: its tasks go to waiting, as before). Scores are the same as
-- in waiting (include/priority.lua).

-- A task that claim took through its group (its hash's group_held=1) left pending: its
-- group runs one task fewer, and, when it has more ready, takes its turn again (a group
-- held back by its concurrency limit left the ring). The hash's mark goes, so a later
-- report of the same task cannot count twice. Wakes an idle runner through `signal`.
local function group_ended(groups, task_key, group, signal, turn_us)
  if not (groups and group and group ~= '') then return end
  redis.call('HDEL', task_key, 'group_held')
  local running = groups .. 'running'
  -- (pcall: a count that is not a whole number, corrupted or written by something else,
  -- must not stop the script half-way; it is dropped, and the reclaimer's heal recounts it)
  local n = redis.pcall('HINCRBY', running, group, -1)
  if type(n) ~= 'number' or n <= 0 then
    redis.pcall('HDEL', running, group)
  end
  if redis.call('EXISTS', groups .. 'g:' .. group) == 1
      and redis.call('ZADD', groups .. 'ring', 'NX', turn_us, group) == 1
      and signal and redis.call('LLEN', signal) == 0 then
    redis.call('RPUSH', signal, '1')
  end
end

-- (left out here, not called by this script: ready_set, make_ready, unready)
-- <<< include/groups.lua

-- >>> include/unblock.lua
-- A claim that left ready tasks in waiting because the queue ran as many as its
-- concurrency limit allows marks blocked=1 in the queue's control hash; a script that takes
-- a task out of pending then wakes one idle runner through the queue's signal list, so the
-- freed slot is taken at once rather than at the runner's next idle_wait. control is nil
-- for a caller that passes no control key (one written before flow control): no wake-up.
local function unblock(control, signal)
  if control and redis.pcall('HDEL', control, 'blocked') == 1 then
    if redis.pcall('LLEN', signal) == 0 then
      redis.pcall('RPUSH', signal, '1')
    end
  end
end
-- <<< include/unblock.lua

local attempt = argv_whole('suspend', 1, 'attempt', 1, MOST)
local index = argv_whole('suspend', 2, 'index', 0, MOST)
local kind, name = ARGV[3], ARGV[4]
if kind ~= 'sleep' and kind ~= 'receive' then
  return redis.error_reply('ERR suspend: ARGV[3] kind is "sleep" or "receive"')
end
if kind == 'receive' and (name == '' or #name > 200) then
  return redis.error_reply('ERR suspend: ARGV[4] a signal name takes 1 to 200 bytes')
end
local delay = argv_whole('suspend', 5, 'delay_ms', 0, MOST, false)
local most = argv_whole('suspend', 6, 'max_steps', 1, MOST)
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
if delay and delay > MOST - now then delay = MOST - now end
local f = redis.pcall('HMGET', KEYS[1], 'state', 'attempt', 'steps', 'cancel_requested',
  'awaiting', 'awaiting_until', 'group', 'group_held', 'signals_kept', 'signals_kept_bytes')
if f['err'] or f[1] ~= 'pending' or f[2] ~= tostring(attempt) then
  return {'stale'}
end
if f[4] then return {'cancel'} end
local count = whole(f[3], 0, MOST) or 0
if index < count then
  return {'conflict', redis.call('HGET', KEYS[1], 'step:' .. index) or ''}
end
if index > count then
  return redis.error_reply('ERR suspend: index ' .. index .. ' after ' .. count .. ' steps')
end
if f[5] and f[5] ~= '' and (kind ~= 'receive' or f[5] ~= name) then
  return {'conflict', cjson.encode({name = f[5], kind = 'receive', awaiting = true})}
end
if count >= most then return {'limit', 'steps'} end

local function record(entry)
  redis.call('HSET', KEYS[1], 'step:' .. index, cjson.encode(entry), 'steps', count + 1)
end

local id = redis.call('HGET', KEYS[1], 'id') or ''
local function leave(until_ms)  -- pending -> scheduled, due at until_ms
  redis.call('ZREM', KEYS[2], id)
  redis.call('ZADD', KEYS[3], until_ms, id)
  redis.call('HSET', KEYS[1], 'state', 'scheduled', 'due_at', until_ms, 'suspended_at', now)
  if f[8] == '1' then
    group_ended(KEYS[6], KEYS[1], f[7], KEYS[5], t[1] * 1000000 + t[2])
  end
  unblock(KEYS[4], KEYS[5])
  return {'suspended', until_ms}
end

if kind == 'sleep' then
  local until_ms = now + (delay or 0)
  record({name = 'sleep', kind = 'sleep', at = now, ['until'] = until_ms})
  return leave(until_ms)
end
local value = redis.call('HGET', KEYS[1], 'signal:' .. name)
if value then
  record({name = name, kind = 'receive', at = now, value = value})
  redis.call('HDEL', KEYS[1], 'signal:' .. name, 'awaiting', 'awaiting_until')
  local kept = (whole(f[9], 0, MOST) or 0) - 1  -- (signal.lua's count of kept signals)
  if kept > 0 then
    local bytes = math.max(0, (whole(f[10], 0, MOST) or 0) - #value)
    redis.call('HSET', KEYS[1], 'signals_kept', kept, 'signals_kept_bytes', bytes)
  else
    redis.call('HDEL', KEYS[1], 'signals_kept', 'signals_kept_bytes')
  end
  return {'signal', value}
end
local until_ms = (f[5] == name and whole(f[6], 0, MOST)) or (delay and now + delay) or MOST
if until_ms <= now then
  record({name = name, kind = 'receive', at = now, timeout = true})
  redis.call('HDEL', KEYS[1], 'awaiting', 'awaiting_until')
  return {'timeout'}
end
redis.call('HSET', KEYS[1], 'awaiting', name, 'awaiting_until', until_ms)
return leave(until_ms)
