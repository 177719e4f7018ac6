#!lua
-- wait: a producer waits for a task's end (succeeded or dead) without polling.
-- A finished or unknown task: its fields, nothing written. Otherwise the task's hash is
-- marked waited=1, and the script that ends the task (complete, fail or reclaim to dead,
-- cancel, claim burying a broken task) pushes one element to its done list. The producer
-- blocks on that list with `BLMOVE <done> <done> LEFT RIGHT <timeout>`: the element is
-- moved back onto the same list, so one element wakes every producer blocked there. Then
-- it calls this script again to read the end. Sent in the same write right behind the
-- BLMOVE, it runs the moment the wait ends: one round trip per wait.
--
-- KEYS[1] task hash <prefix>:{<queue>}:task:<id>
-- KEYS[2] done list <prefix>:{<queue>}:done:<id>
-- Returns: {state, result, last_error, type}, each nil when the hash has no such field
--          (all nil: no hash; the task never existed, or it finished and expired).
--          State "succeeded" or "dead": finished, nothing written. Any other state: the
--          hash now has waited=1, and the done list is deleted (an element left there by
--          an end before retry_dead put the task back would wake this run's waiters at
--          once). A key of another type: the server's error, nothing written.
local f = redis.call('HMGET', KEYS[1], 'state', 'result', 'last_error', 'type')
if f[1] and f[1] ~= 'succeeded' and f[1] ~= 'dead' then
  redis.call('HSET', KEYS[1], 'waited', 1)
  redis.call('DEL', KEYS[2])
end
return f
