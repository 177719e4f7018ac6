#!lua
-- workflow_heal: write the outbox entry of each node of a run whose hash says it ended
-- (succeeded or dead) but that has no entry, in the node's slot. Such a node was ended by a
-- script that writes no entry (a runner of an older culex, from before workflows, that
-- completed, failed or reclaimed it): its downstreams and its run would never learn of its
-- end. A runner passes the nodes whose end its run has not recorded (workflows.finishing's
-- heal, a pass over the unfinished runs about once a lease); the entry written here is
-- applied as any other (include/workflow.lua). A node of another run, one that has not
-- ended, one whose entry waits in the outbox, and one ended under an earlier retry of the
-- run (its `retry_epoch`, 0 when none, is not the run's `retries`: a retry will rearm it)
-- are left alone. It also replies what each blocked node of the run still waits for, for
-- the caller to find a node that waits for an id that is no node of the run (an `up` a
-- foreign writer made up): that run can never go on.
--
-- KEYS[1] task key prefix <prefix>:{<queue>}:task:   (the entries are <prefix>:{<queue>}:
--         outbox and outbox:<id>)
-- ARGV[1] run            the run's id
-- ARGV[2] retries        the run's record's `retries` ("" or 0 when never retried)
-- ARGV[3..] node ids     of that run, on this queue
-- Returns: {the ids whose entry was written (usually none), {id, waited ids as a JSON
--          list, id, ...} for each node of the run that is blocked}.
-- An error, and nothing written, for a bad retries.

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

-- >>> include/workflow.lua
-- A workflow node is an ordinary task whose hash also has `run` (its workflow run's id:
-- the mark of a node), `node` (its name in the run), `policy`, `up` and `down` (JSON lists
-- of its upstreams and its downstreams, `[[queue, task_id], ...]`) and on_end=1. A node
-- whose upstreams have not all ended says state `blocked`: its hash exists, its id is in
-- no set, <base>waits:<id> (a set) holds the upstream ids it still waits for and
-- <base>upstream:<id> (a hash) what its upstreams ended with. <base> is the task key
-- prefix <prefix>:{<queue>}:task: without its `task:`, so every key below stays in the
-- queue's slot, and no script takes a key more for them.
--
-- When a node ends, succeeded or dead for any reason, the script that ends it writes, in
-- the same call, after the task's own change and only when that change happened (a
-- refused report writes nothing), an outbox entry that a runner applies later to the
-- node's downstreams and its run:
--   <base>outbox       ZSET: member the id, score now (ms, the server's clock): the time
--                      from which a runner may take the entry
--   <base>outbox:<id>  HASH, written after a DEL of any older entry of the id: run, node
--                      (the id when the hash has none), down ("[]" when none), type
--                      (the job type, for reading the result typed), state
--                      (succeeded or dead), result (the result's JSON text, only when
--                      succeeded) or error (the reason it died, its last_error, only when
--                      dead), at (now)

-- Task `id` ended with state 'succeeded' (result: its JSON text) or 'dead' (err: its
-- last_error). A node (its hash has `run`) gets its outbox entry, and the reply is true;
-- any other task (or a task prefix that is nil or does not end in task:) writes nothing,
-- and the reply is false. pcall: a task key or an outbox of another type must not stop the
-- script after the task's own change.
local function node_ended(task_prefix, id, state, result, err, now)
  local base = task_prefix and string.match(task_prefix, '^(.*)task:$')
  if not base then return false end
  local f = redis.pcall('HMGET', task_prefix .. id, 'run', 'node', 'down', 'type')
  if f['err'] or not f[1] then return false end
  local entry = base .. 'outbox:' .. id
  redis.call('DEL', entry)
  redis.call('HSET', entry, 'run', f[1], 'node', f[2] or id, 'down', f[3] or '[]',
    'state', state, 'at', now, 'type', f[4] or '')
  if state == 'succeeded' then
    redis.call('HSET', entry, 'result', result)
  else
    redis.call('HSET', entry, 'error', err)
  end
  redis.pcall('ZADD', base .. 'outbox', now, id)
  return true
end

-- (left out here, not called by this script: task_prefix_of, node_forget)
-- <<< include/workflow.lua

local retries = argv_whole('workflow_heal', 2, 'retries', 0, MOST, 0)
local base = string.sub(KEYS[1], 1, #KEYS[1] - 5)
local found, blocked = {}, {}
for i = 3, #ARGV do
  local id = ARGV[i]
  local f = redis.pcall('HMGET', KEYS[1] .. id, 'run', 'state', 'retry_epoch', 'result',
    'last_error')
  if not f['err'] and f[1] == ARGV[1] and (f[2] == 'succeeded' or f[2] == 'dead')
      and (whole(f[3], 0, MOST) or 0) == retries
      and redis.call('EXISTS', base .. 'outbox:' .. id) == 0 then
    found[#found + 1] = {id, f[2], f[4] or 'null', f[5] or ''}
  elseif not f['err'] and f[1] == ARGV[1] and f[2] == 'blocked' then
    local waits = redis.pcall('SMEMBERS', base .. 'waits:' .. id)
    if not waits['err'] and #waits > 0 then
      blocked[#blocked + 1] = id
      blocked[#blocked + 1] = cjson.encode(waits)
    end
  end
end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local out = {}
for _, n in ipairs(found) do
  node_ended(KEYS[1], n[1], n[2], n[3], n[4], now)
  out[#out + 1] = n[1]
end
return {out, blocked}
