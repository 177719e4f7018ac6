#!lua flags=no-writes
-- read_queues: what a scrape of the metrics reads of each queue (culex/operations/metrics.py), for
-- many queues in one call: the sizes of its four sets and of its groups' ready tasks, the
-- first task of waiting and of the groups' ready tasks, and its counters since counting
-- began. Writes nothing. One flat reply for a batch of queues, where the commands one by
-- one made eight replies a queue for the client to read; the keys a queue does not have
-- (most queues have no pending, scheduled, dead or grouped task) cost one EXISTS together.
-- On a Cluster the keys of one call must share a slot: there each call names one queue.
--
-- KEYS[1] queue keys start  <prefix>:{<queue>}:  (what every key of a queue starts with);
--          more queues may follow, KEYS[2], KEYS[3], ..., each read in turn
-- Returns: one flat array, for each queue in the order of KEYS: ZCARD of waiting, pending,
--          scheduled, dead and groups:ready; the score of the first member of waiting (its
--          highest priority, then earliest ready) and of groups:ready, as stored ("" when
--          the set is empty); the length of the next part, then the fields and values of
--          stats:total as HGETALL gives them. A key of another type: the server's error.
local call = redis.call
local reply = {}
local size = 0
for q = 1, #KEYS do
  local base = KEYS[q]
  local waiting_key, grouped_key = base .. 'waiting', base .. 'groups:ready'
  local pending_key, scheduled_key = base .. 'pending', base .. 'scheduled'
  local dead_key, totals_key = base .. 'dead', base .. 'stats:total'
  local waiting = call('ZCARD', waiting_key)
  reply[size + 1] = waiting
  reply[size + 6] = ''
  if waiting > 0 then
    reply[size + 6] = call('ZRANGE', waiting_key, 0, 0, 'WITHSCORES')[2]
  end
  local counters = {}
  if call('EXISTS', pending_key, scheduled_key, dead_key, grouped_key, totals_key) == 0 then
    reply[size + 2], reply[size + 3], reply[size + 4], reply[size + 5] = 0, 0, 0, 0
    reply[size + 7] = ''
  else
    local grouped = call('ZCARD', grouped_key)
    reply[size + 2] = call('ZCARD', pending_key)
    reply[size + 3] = call('ZCARD', scheduled_key)
    reply[size + 4] = call('ZCARD', dead_key)
    reply[size + 5] = grouped
    reply[size + 7] = ''
    if grouped > 0 then
      reply[size + 7] = call('ZRANGE', grouped_key, 0, 0, 'WITHSCORES')[2]
    end
    counters = call('HGETALL', totals_key)
  end
  local n = #counters
  reply[size + 8] = n
  size = size + 8
  for i = 1, n do
    reply[size + i] = counters[i]
  end
  size = size + n
end
return reply
