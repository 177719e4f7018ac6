-- delete: remove tasks that are not running, for good: each id leaves its state's set and
-- its hash is deleted. A pending task is refused (its runner holds it under a lease and
-- only its report ends it), and so is a succeeded one (its hash expires by itself).
-- Producers waiting for a deleted task's end are woken, and then find no record.
--
-- KEYS[1] waiting zset
-- KEYS[2] scheduled zset
-- KEYS[3] dead zset
-- KEYS[4] task key prefix <prefix>:{<queue>}:task:   (the ids come in ARGV; the prefixes
--         keep every key in the queue's slot)
-- KEYS[5] done list prefix <prefix>:{<queue>}:done:
-- KEYS[6] dedupe hash <prefix>:{<queue>}:dedupe   optional: a deleted task frees its
--         dedupe key there (include/dedupe.lua)
-- ARGV[1..] ids             the ids to delete
-- Returns: {deleted, skipped}: two arrays of ids. An id is deleted when its hash says state
--          "waiting", "scheduled" or "dead" and the id is in that set: it leaves the set, the
--          hash is deleted, and when the hash had waited=1 one element is pushed to its done
--          list, which expires after 60 s (see wait.lua). An id in dead whose hash is gone
--          (expired) is removed from dead and counts as deleted. Any other id is skipped and
--          changes nothing (pending, succeeded, unknown, or a key of another type).

-- >>> include/dedupe.lua
-- The dedupe hash maps a key to the live task enqueued with it (enqueue.lua). A task that
-- ends frees its key, only while the key still names it: a later task may have taken it.
-- dedupe_hash nil (a caller that sends fewer keys, e.g. a runner of an older version) or a
-- task without a key costs nothing; enqueue.lua treats a key whose task has ended as free,
-- so a key left behind heals itself. pcall: a dedupe key of another type must not stop
-- the task's own change.
local function free_dedupe(dedupe_hash, key, id)
  if dedupe_hash and key and redis.pcall('HGET', dedupe_hash, key) == id then
    redis.pcall('HDEL', dedupe_hash, key)
  end
end
-- <<< include/dedupe.lua

local sets = {waiting = KEYS[1], scheduled = KEYS[2], dead = KEYS[3]}
local deleted, skipped = {}, {}
for _, id in ipairs(ARGV) do
  local key = KEYS[4] .. id
  local f = redis.pcall('HMGET', key, 'state', 'waited', 'dedupe_key')
  local set = not f['err'] and f[1] and sets[f[1]]
  if set and redis.call('ZSCORE', set, id) then
    redis.call('ZREM', set, id)
    redis.call('DEL', key)
    free_dedupe(KEYS[6], f[3], id)
    if f[2] == '1' then
      redis.call('RPUSH', KEYS[5] .. id, 'done')
      redis.call('PEXPIRE', KEYS[5] .. id, 60000)
    end
    deleted[#deleted + 1] = id
  elseif not f['err'] and not f[1] and redis.call('EXISTS', key) == 0
      and redis.call('ZSCORE', KEYS[3], id) then
    redis.call('ZREM', KEYS[3], id)
    deleted[#deleted + 1] = id
  else
    skipped[#skipped + 1] = id
  end
end
return {deleted, skipped}
