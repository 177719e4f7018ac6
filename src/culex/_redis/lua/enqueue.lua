-- enqueue: store a new task and put it in waiting (ready now) or scheduled (due later).
--
-- KEYS[1] task hash      <prefix>:{<queue>}:task:<id>
-- KEYS[2] waiting zset   <prefix>:{<queue>}:waiting
-- KEYS[3] scheduled zset <prefix>:{<queue>}:scheduled
-- KEYS[4] signal list    <prefix>:{<queue>}:signal   (wakes idle runners)
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
-- Returns: {state, id} where state is "waiting" or "scheduled";
--          {"exists", id} when a task with this id already exists (nothing changes:
--          client-made ids make enqueue idempotent).
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {'exists', ARGV[1]}
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
if state == 'waiting' then
  redis.call('ZADD', KEYS[2], now, ARGV[1])
  -- one token is enough to wake a runner; more would only make idle runners spin
  if redis.call('LLEN', KEYS[4]) == 0 then
    redis.call('RPUSH', KEYS[4], '1')
  end
else
  redis.call('ZADD', KEYS[3], due, ARGV[1])
end
return {state, ARGV[1]}
