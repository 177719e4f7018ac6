#!lua
-- schedule: enqueue one slot of a periodic job, exactly once however many runners ask.
-- The record remembers the latest slot decided; a slot at or before it is never enqueued
-- again, so the first runner to ask wins and the others change nothing.
--
-- KEYS[1] periodic record hash <prefix>:{<queue>}:periodic:<type>
-- KEYS[2] task hash      <prefix>:{<queue>}:task:<id>
-- KEYS[3] waiting zset   <prefix>:{<queue>}:waiting
-- KEYS[4] signal list    <prefix>:{<queue>}:signal
-- KEYS[5] task key prefix <prefix>:{<queue>}:task:   (to read the previous run's state;
--         its id is in the record)
-- KEYS[6] events stream <prefix>:{<queue>}:events   optional: the task enqueued gets its
--         `enqueued` event, attempt 0 (include/events.lua)
-- ARGV[1] id             <type>:<slot ms> for a slot (deterministic: the same on every runner)
-- ARGV[2] type           the job class name
-- ARGV[3] queue
-- ARGV[4] slot_ms        the slot to enqueue; "" for a trigger: one run now, outside the
--                        schedule (no slot or overlap check; the slots are left alone)
-- ARGV[5] next_slot_ms   the slot after it, recorded for `culex periodic`; "" if none
-- ARGV[6] overlap        "1": enqueue even while the previous run is waiting or pending
-- ARGV[7] run_new        "1": a job with no record runs: a slot now (run_on_start), or a
--                        trigger; otherwise a job with no record runs nothing: its slot is
--                        recorded and waits for the next one, a trigger is refused
-- ARGV[8] max_retries    stored like enqueue's (0: periodic jobs never retry)
-- (slot_ms, next_slot_ms and max_retries: whole numbers in 0 .. 2^42 - 1, or "" where said;
-- an error, and nothing written, for another: include/numbers.lua)
-- ARGV[9..] pairs        field, value written on the record with it, for readers that do
--                        not have the job's class: `job`, `queue`, `schedule`, `timezone`;
--                        but a pair named `headers` is the task's headers (a JSON object
--                        of strings, as enqueue.lua's ARGV[13]), written on the task
-- Returns: {outcome, id} where outcome is
--   "enqueued"  the task is waiting (hash and sets exactly as enqueue.lua writes them,
--               plus `periodic` = "1" and `slot`: the slot ms, "" for a trigger, whose
--               hash also says `trigger` = "manual");
--   "done"      this slot or a later one was already decided (another runner won);
--   "new"       no record yet and run_new is not "1": the slot is recorded, not run;
--   "overlap"   the previous run is still waiting, scheduled or pending: the slot is skipped;
--   "early"     the slot is later than the server's clock: nothing changes;
--   "unknown"   a trigger of a job with no record while run_new is not "1": nothing changes.
--   "paused"    the record says paused = "1" (periodic_pause.lua): nothing changes, for a
--               slot and a trigger alike.
-- Record fields: decided_slot, last_slot, last_task, last_enqueued_at, next_slot,
-- skipped_slot, skip_reason and the pairs (here); last_finished_at, last_outcome (complete,
-- fail). A slot's call renews the record: it expires KEEP_MS (7 days) after its next slot
-- (after now when there is none), so the record of a job no runner schedules any more ends;
-- a trigger gives a record without an expiry one of KEEP_MS.
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

-- >>> include/events.lua
-- Each queue has one stream, <prefix>:{<queue>}:events, an OPTIONAL key of the scripts
-- that change a task's state: a caller that sends it (culex with the setting `events` on)
-- gets one entry per change, written in the same call; one that does not, none. An entry
-- holds no params, result or error: task (the id), job (its type), kind (enqueued,
-- started, succeeded, failed, dead) and attempt; its id (XADD *) is the server's time in
-- ms. The stream keeps about EVENTS_MAX entries (MAXLEN ~: whole nodes go, so trimming
-- costs next to nothing), and, about once in 100 entries (by the server's clock), drops
-- those older than EVENTS_AGE_MS (MINID ~); it expires EVENTS_AGE_MS after its last entry
-- (every key ends). pcall: a key of another type written by something else must not stop
-- a state change half-way; it gets no entry.
local EVENTS_MAX = 10000
local EVENTS_AGE_MS = 86400000
local function emit(stream, id, job, kind, attempt, now)
  if not stream then return end
  redis.pcall('XADD', stream, 'MAXLEN', '~', EVENTS_MAX, '*', 'task', id, 'job', job or '',
    'kind', kind, 'attempt', attempt or 0)
  redis.pcall('PEXPIRE', stream, EVENTS_AGE_MS)
  if now % 100 == 0 then
    redis.pcall('XTRIM', stream, 'MINID', '~', now - EVENTS_AGE_MS)
  end
end
-- <<< include/events.lua

local events_key = KEYS[6]
local KEEP_MS = 7 * 24 * 3600 * 1000
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local id = ARGV[1]
local trigger = ARGV[4] == ''
-- (every number checked before any write: include/numbers.lua)
local slot = not trigger and argv_whole('schedule', 4, 'slot_ms', 0, MOST)
local next_slot = argv_whole('schedule', 5, 'next_slot_ms', 0, MOST, false)
argv_whole('schedule', 8, 'max_retries', 0, MOST)

if not trigger and slot > now then  -- slots come from this server's clock: not due yet
  return {'early', id}
end

if (#ARGV - 8) % 2 ~= 0 then
  return redis.error_reply('ERR the record fields after ARGV[8] come in pairs')
end
-- A paused job enqueues nothing, and its record is left as it is (its pause keeps it).
if redis.call('HGET', KEYS[1], 'paused') == '1' then
  return {'paused', id}
end
if trigger then
  if redis.call('EXISTS', KEYS[1]) == 0 and ARGV[7] ~= '1' then
    return {'unknown', id}
  end
  if redis.call('EXISTS', KEYS[2]) == 1 then
    return {'done', id}
  end
end

local fields, headers = {}, nil
for i = 9, #ARGV, 2 do
  if ARGV[i] == 'headers' then  -- (the task's, not the record's)
    headers = ARGV[i + 1]
  else
    fields[#fields + 1] = ARGV[i]
    fields[#fields + 1] = ARGV[i + 1]
  end
end
if ARGV[5] ~= '' then
  fields[#fields + 1] = 'next_slot'
  fields[#fields + 1] = ARGV[5]
end
if #fields > 0 then
  redis.call('HSET', KEYS[1], unpack(fields))
end

if not trigger then
  -- renewed by every scheduler that still runs the job; ends a week after a slot it missed
  redis.call('PEXPIREAT', KEYS[1], math.max(next_slot or now, now) + KEEP_MS)
  local decided = redis.call('HGET', KEYS[1], 'decided_slot')
  -- Another runner was first, or a later slot was decided: after an outage the latest
  -- due slot is the one catch-up run, and the slots before it stay passed over. (A
  -- decided_slot that is not a whole number in 0 .. MOST counts as 0: this slot is decided.)
  if decided and (whole(decided, 0, MOST) or 0) >= slot then
    return {'done', id}
  end
  redis.call('HSET', KEYS[1], 'decided_slot', slot)
  if not decided and ARGV[7] ~= '1' then  -- a new job waits for its first slot
    return {'new', id}
  end
  if redis.call('EXISTS', KEYS[2]) == 1 then
    return {'done', id}
  end
  local last = redis.call('HGET', KEYS[1], 'last_task')
  if last and ARGV[6] ~= '1' then
    -- (pcall: a key of another type is no task that runs: the slot is not skipped)
    local state = redis.pcall('HGET', KEYS[5] .. last, 'state')
    if state == 'waiting' or state == 'scheduled' or state == 'pending' then
      redis.call('HSET', KEYS[1], 'skipped_slot', slot, 'skip_reason', 'overlap')
      return {'overlap', id}
    end
  end
  redis.call('HSET', KEYS[1], 'last_slot', slot)
end

redis.call('HSET', KEYS[2], 'id', id, 'type', ARGV[2], 'queue', ARGV[3],
  'params', '{}', 'enqueue_time', now, 'retry_count', 0, 'attempt', 0,
  'max_retries', ARGV[8], 'state', 'waiting', 'due_at', now, 'periodic', '1',
  'slot', ARGV[4])
if trigger then
  redis.call('HSET', KEYS[2], 'trigger', 'manual')
end
if headers and headers ~= '' then
  redis.call('HSET', KEYS[2], 'headers', headers)
end
redis.call('ZADD', KEYS[3], now, id)
-- one token is enough to wake a runner (as in enqueue.lua)
if redis.call('LLEN', KEYS[4]) == 0 then
  redis.call('RPUSH', KEYS[4], '1')
end
emit(events_key, id, ARGV[2], 'enqueued', 0, now)
redis.call('HSET', KEYS[1], 'last_task', id, 'last_enqueued_at', now)
if trigger and redis.call('PTTL', KEYS[1]) < 0 then
  redis.call('PEXPIRE', KEYS[1], KEEP_MS)
end
return {'enqueued', id}
