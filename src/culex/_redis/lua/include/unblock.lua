-- Shared by the scripts that take a task out of pending (complete, fail, reclaim,
-- release): a slot under the queue's concurrency limit is free again.

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
