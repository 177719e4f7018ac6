-- The task event stream, written once: enqueue.lua, schedule.lua, claim.lua, complete.lua,
-- fail.lua, retry_later.lua, reclaim.lua, cancel.lua and workflow_resolve.lua each carry a copy of this file between
-- `-- >>> include/events.lua` and `-- <<< include/events.lua`. Edit this file, then run
-- `python -m culex._redis.assembly` to refresh the copies. Not a script of its own. The
-- stream's entries are in docs/wire-format.md; what they mean is in docs/events.md.

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
