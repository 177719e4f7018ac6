#!lua
-- signal: send a signal to a durable task (culex's `task.signal(name, value)`). It is kept
-- with the task (the hash's signal:<name>; a later signal of the same name replaces it)
-- until the task's `self.receive(name)` takes it (suspend.lua). A task that waits for
-- it (awaiting <name>, in scheduled) goes to waiting at once.
-- The signals a task keeps are bounded: at most max_kept names and max_kept_bytes of
-- values together (the hash's signals_kept and signals_kept_bytes count them: signal.lua
-- adds, suspend.lua takes away). A signal past either is refused, "full", nothing written;
-- but a signal the task awaits is always taken (its receive takes it at the next attempt).
--
-- KEYS[1] task hash      <prefix>:{<queue>}:task:<id>
-- KEYS[2] scheduled zset <prefix>:{<queue>}:scheduled
-- KEYS[3] waiting zset   <prefix>:{<queue>}:waiting
-- KEYS[4] signal list    <prefix>:{<queue>}:signal   (wakes an idle runner)
-- KEYS[5] groups prefix  <prefix>:{<queue>}:groups:   (a task of a group waits in its
--         group's ready set: include/groups.lua)
-- ARGV[1] name           the signal's name, 1 to 200 bytes
-- ARGV[2] value          its value, JSON text (at most max_bytes)
-- ARGV[3] max_bytes      the largest value a signal takes (culex sends 1048576, 1 MiB)
-- ARGV[4] max_kept       optional: "" or left out: 100. The most signals a task keeps
-- ARGV[5] max_kept_bytes optional: "" or left out: 4194304 (4 MiB). The most bytes of
--                        values a task keeps together
-- ARGV[6] reply          optional: "" or left out: the reply is one string, as below;
--                        "keep": the reply is {outcome, state, awaiting}: the outcome
--                        below, the task's state and the signal it awaits ("" for none,
--                        and both "" for no task), as the call found them; "deliver": as
--                        "keep", but a signal the task does not await (its hash's
--                        awaiting is another name, or none) is not kept: "skipped"
-- Returns: "delivered" (the task waited for it: now waiting), "kept" (kept for a later
--          receive), "ended" (the task succeeded or is dead: nothing kept), "unknown" (no
--          such task), "full" (with this one the task would keep more than max_kept
--          signals, or max_kept_bytes: nothing kept), "skipped" (reply "deliver" only:
--          nothing kept).
-- An error, and nothing written, for a bad name, number or reply, or a value too large.

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

-- >>> include/priority.lua
-- waiting is one sorted set: a task's score is ready_ms - priority * 2^42, so ZPOPMIN takes
-- the highest priority first and, within one priority, the earliest ready (2^42 ms is the
-- year 2109; scores stay whole numbers well below 2^53, where doubles are exact). Priority
-- 0, every task's without a `priority` field, scores its ready time as before priorities.
-- A priority that is not a whole number in -100 .. 100 counts as 0: a script must not stop
-- half-way on a field a foreign producer wrote. '%.0f': Lua's own number to text conversion
-- may round a number of 15 or more digits; a ready time alone (13 digits, below 2^42) it
-- writes exactly, so the common case, no priority, skips the formatting.
local function waiting_score(ready_ms, priority)
  if (priority == nil or priority == 0) and type(ready_ms) == 'number' then
    return ready_ms
  end
  local p = tonumber(priority)
  if not p or p ~= math.floor(p) or p < -100 or p > 100 then p = 0 end
  return string.format('%.0f', ready_ms - p * 4398046511104)
end
-- <<< include/priority.lua

-- >>> include/groups.lua
-- A task enqueued with a group (its hash's `group`) waits in its group's own ready set
-- <groups>g:<group>, not in waiting; <groups>ready lists every grouped ready task (the
-- queue's counts and listings of waiting add it), and the ring <groups>ring holds the
-- groups that have ready tasks, scored by their turn (µs): claim takes one task from the
-- group whose turn is first, then moves it to the back. <groups>running counts each group's
-- tasks in pending. groups is the KEY <prefix>:{<queue>}:groups: (nil: a caller that passes
-- none, written before groups: its tasks go to waiting, as before). Scores are the same as
-- in waiting (include/priority.lua).

-- Make task `id` ready with `score`: in waiting, or in its group's ready set, the grouped
-- ready set and (at the back, if not there yet) the ring. turn_us: the server's time, µs.
-- True when the task went to its group.
local function make_ready(waiting, groups, id, score, group, turn_us)
  if groups and group and group ~= '' then
    redis.call('ZADD', groups .. 'g:' .. group, score, id)
    redis.call('ZADD', groups .. 'ready', score, id)
    redis.call('ZADD', groups .. 'ring', 'NX', turn_us, group)
    return true
  end
  redis.call('ZADD', waiting, score, id)
  return false
end

-- (left out here, not called by this script: ready_set, unready, group_ended)
-- <<< include/groups.lua

local name = ARGV[1]
if name == '' or #name > 200 then
  return redis.error_reply('ERR signal: ARGV[1] name takes 1 to 200 bytes')
end
local most = argv_whole('signal', 3, 'max_bytes', 1, MOST)
local max_kept = argv_whole('signal', 4, 'max_kept', 1, MOST, 100)
local max_kept_bytes = argv_whole('signal', 5, 'max_kept_bytes', 1, MOST, 4194304)
local mode = ARGV[6] or ''
if mode ~= '' and mode ~= 'keep' and mode ~= 'deliver' then
  return redis.error_reply('ERR signal: ARGV[6] reply is "", "keep" or "deliver"')
end
if #ARGV[2] > most then
  return redis.error_reply('ERR signal: ARGV[2] value is larger than ' .. most .. ' bytes')
end
local f = redis.pcall('HMGET', KEYS[1], 'state', 'awaiting', 'id', 'priority', 'group',
  'signals_kept', 'signals_kept_bytes')
local function reply(outcome)
  if mode == '' then return outcome end
  return {outcome, f[1] or '', f[2] or ''}
end
if f['err'] or not f[1] then return reply('unknown') end
if f[1] == 'succeeded' or f[1] == 'dead' then return reply('ended') end
local awaited = f[2] == name
if mode == 'deliver' and not awaited then return reply('skipped') end
local field = 'signal:' .. name
local had = redis.call('HEXISTS', KEYS[1], field) == 1
local kept = (whole(f[6], 0, MOST) or 0) + (had and 0 or 1)
local bytes = (whole(f[7], 0, MOST) or 0) + #ARGV[2]
if had then bytes = math.max(#ARGV[2], bytes - redis.call('HSTRLEN', KEYS[1], field)) end
if not awaited and (kept > max_kept or bytes > max_kept_bytes) then return reply('full') end
redis.call('HSET', KEYS[1], field, ARGV[2], 'signals_kept', kept, 'signals_kept_bytes', bytes)
if f[1] ~= 'scheduled' or not awaited then return reply('kept') end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call('ZREM', KEYS[2], f[3])
redis.call('HSET', KEYS[1], 'state', 'waiting', 'due_at', now)
make_ready(KEYS[3], KEYS[5], f[3], waiting_score(now, f[4]), f[5], t[1] * 1000000 + t[2])
if redis.call('LLEN', KEYS[4]) == 0 then
  redis.call('RPUSH', KEYS[4], '1')
end
return reply('delivered')
