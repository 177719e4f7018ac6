-- enqueue: store a new task and put it in waiting (ready now) or scheduled (due later).
--
-- KEYS[1] task hash      <prefix>:{<queue>}:task:<id>
-- KEYS[2] waiting zset   <prefix>:{<queue>}:waiting
-- KEYS[3] scheduled zset <prefix>:{<queue>}:scheduled
-- KEYS[4] signal list    <prefix>:{<queue>}:signal   (wakes idle runners)
-- KEYS[5] dedupe hash    <prefix>:{<queue>}:dedupe   optional: needed only with a dedupe
--                        key (ARGV[10]); maps each key to the live task enqueued with it
-- KEYS[6] task key prefix <prefix>:{<queue>}:task:   optional, as KEYS[5]: where the task
--                        that holds the dedupe key is read
-- ARGV[1] id
-- ARGV[2] type           the job class name, e.g. "SendEmailJob"
-- ARGV[3] queue          the queue name (stored for producers and dashboards)
-- ARGV[4] params         a JSON object
-- ARGV[5] due_ms         absolute due time in ms since the epoch, or "" for "now + delay_ms"
-- ARGV[6] delay_ms       used when due_ms is ""; 0 means now
-- ARGV[7] max_retries    retries after the first attempt (the job's max_retries)
-- ARGV[8] trace          optional: the producer's trace context, a JSON object of
--                        propagation fields (W3C traceparent, tracestate); stored as the
--                        field `trace` when given and not ""
-- ARGV[9] priority       optional: a whole number in -100 .. 100, higher runs first; ""
--                        or absent: 0. Stored as the field `priority` unless 0; the task's
--                        score in waiting is ready_ms - priority * 2^42 (include/priority.lua)
-- ARGV[10] dedupe_key    optional: 1 to 500 bytes, "" or absent for none. While the task
--                        that holds this key (KEYS[5]) is waiting, scheduled or pending,
--                        nothing is stored and the reply names that task; otherwise the
--                        new task takes the key (field `dedupe_key`). A key whose task has
--                        ended or is gone counts as free.
-- Returns: {state, id} where state is "waiting" or "scheduled";
--          {"exists", id} when a task with this id already exists (nothing changes:
--          client-made ids make enqueue idempotent);
--          {"deduped", id of the live task that holds the dedupe key} (nothing changes).
-- An error, and nothing written, for a bad priority, a bad dedupe key, or a dedupe key
-- without KEYS[5] and KEYS[6].

-- >>> include/priority.lua
-- waiting is one sorted set: a task's score is ready_ms - priority * 2^42, so ZPOPMIN takes
-- the highest priority first and, within one priority, the earliest ready (2^42 ms is the
-- year 2109; scores stay whole numbers well below 2^53, where doubles are exact). Priority
-- 0, every task's without a `priority` field, scores its ready time as before priorities.
-- A priority that is not a whole number in -100 .. 100 counts as 0: a script must not stop
-- half-way on a field a foreign producer wrote. '%.0f': Lua's own number to text conversion
-- may round a number of 15 or more digits.
local function waiting_score(ready_ms, priority)
  local p = tonumber(priority)
  if not p or p ~= math.floor(p) or p < -100 or p > 100 then p = 0 end
  return string.format('%.0f', ready_ms - p * 4398046511104)
end
-- <<< include/priority.lua

local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local priority = 0
if ARGV[9] and ARGV[9] ~= '' then
  priority = tonumber(ARGV[9])
  if not priority or priority ~= math.floor(priority) or priority < -100 or priority > 100 then
    return redis.error_reply('ERR enqueue: ARGV[9] priority must be a whole number in -100 .. 100')
  end
end
local dedupe = ARGV[10] or ''
if dedupe ~= '' and (#dedupe > 500 or not KEYS[6]) then
  return redis.error_reply('ERR enqueue: a dedupe key (ARGV[10]) takes 1 to 500 bytes and '
    .. 'KEYS[5] and KEYS[6]')
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {'exists', ARGV[1]}
end
if dedupe ~= '' then
  local holder = redis.call('HGET', KEYS[5], dedupe)
  if holder then
    local state = redis.pcall('HGET', KEYS[6] .. holder, 'state')
    if state == 'waiting' or state == 'scheduled' or state == 'pending' then
      return {'deduped', holder}
    end
  end
end
local due = now + tonumber(ARGV[6])
if ARGV[5] ~= '' then
  due = tonumber(ARGV[5])
end
local state = 'waiting'
if due > now then
  state = 'scheduled'
end
redis.call('HSET', KEYS[1], 'id', ARGV[1], 'type', ARGV[2], 'queue', ARGV[3],
  'params', ARGV[4], 'enqueue_time', now, 'retry_count', 0, 'attempt', 0,
  'max_retries', ARGV[7], 'state', state, 'due_at', due)
if ARGV[8] and ARGV[8] ~= '' then
  redis.call('HSET', KEYS[1], 'trace', ARGV[8])
end
if priority ~= 0 then
  redis.call('HSET', KEYS[1], 'priority', priority)
end
if dedupe ~= '' then
  redis.call('HSET', KEYS[1], 'dedupe_key', dedupe)
  redis.call('HSET', KEYS[5], dedupe, ARGV[1])
end
if state == 'waiting' then
  redis.call('ZADD', KEYS[2], waiting_score(now, priority), ARGV[1])
  -- one token is enough to wake a runner; more would only make idle runners spin
  if redis.call('LLEN', KEYS[4]) == 0 then
    redis.call('RPUSH', KEYS[4], '1')
  end
else
  redis.call('ZADD', KEYS[3], due, ARGV[1])
end
return {state, ARGV[1]}
