#!lua flags=no-writes
-- read_periodic: a periodic job's record and the state of its last task, in one call, for
-- readers that list periodic jobs without their classes (`culex periodic`, dashboards).
-- Writes nothing.
--
-- KEYS[1] periodic record hash <prefix>:{<queue>}:periodic:<type>
-- KEYS[2] task key prefix <prefix>:{<queue>}:task:   (the last task's id is in the record)
-- Returns: {record, state}: the record's fields and values, as HGETALL gives them (empty
--          when it has expired or never existed), and the state of its last task ("" when
--          it has none, or its hash has expired or is not a hash). A record key of another
--          type: the server's error.
local record = redis.call('HGETALL', KEYS[1])
local state = ''
local last = redis.call('HGET', KEYS[1], 'last_task')
if last then
  local found = redis.pcall('HGET', KEYS[2] .. last, 'state')
  if type(found) == 'string' then
    state = found
  end
end
return {record, state}
