#!lua
-- workflow_record: every change of a workflow run's record, in the run's own slot. ARGV[1]
-- names the change:
--   begin    a run is being enqueued: its record is made, state "staging", with the
--            number of nodes it will have and a deadline. A run left staging past its
--            deadline (its producer stopped) is discarded whole by a runner (`discard`).
--   add      some of its nodes, each id -> JSON [queue, name, [upstream ids], policy];
--            pushes the deadline back by its stage_ms.
--   commit   every node is stored: state "running". From here the run always ends.
--   discard  state "staging" past its deadline (or ARGV[2] "now": its own producer gives
--            up) -> "discarded"; its keys expire a day later.
--   ended    node ARGV[2] ended as ARGV[3] ("succeeded" or "dead"), and so on in pairs
--            (the ends of many nodes in one call): a hash field each, so the same end
--            applied twice counts once; a node the run does not have is skipped. When
--            every node has ended, the run ends:
--            "cancelled" if it was cancelled, else "failed" if a node is dead, else
--            "succeeded"; its keys expire ttl_ms later, and those waiting are woken.
--   cancel   marks the run cancelled (its nodes are cancelled one by one by the caller).
--   broken   the run cannot go on (a runner met a record of one of its nodes it cannot
--            apply): ARGV[2], the node and why, is kept as the record's `error` (the
--            first one), and the run is called off as by `cancel`; it ends "failed".
--   retry    an ended run ("failed" or "cancelled") runs again: state "running", the
--            retried nodes ARGV[2..] no longer count as ended, and the retry's number
--            (the record's `retries`) is returned to fence the nodes' rearming.
--   op       ARGV[2]: the operation under way that spans slots ("enqueue", "cancel",
--            "retry"), or "" once done: a runner finishes one left unfinished.
--
-- KEYS[1] record hash    <prefix>:{run:<id>}:record
-- KEYS[2] nodes hash     <prefix>:{run:<id>}:nodes
-- KEYS[3] ended hash     <prefix>:{run:<id>}:ended
-- KEYS[4] done list      <prefix>:{run:<id>}:done   (one element once the run ended)
-- ARGV[1] change         begin, add, commit, discard, ended, cancel, broken, retry or op
-- ARGV[2..] values       the change's own values, in order:
--         begin          run id, name, nodes (1 .. 2^42 - 1), stage_ms (>= 1), ttl_ms (>= 1)
--         add            pairs: node id, JSON
--         commit, cancel none
--         broken         the node and why it cannot go on (text, cut to 1000 bytes)
--         discard        "now", or "" (only past the deadline)
--         ended          pairs: node id, state
--         retry          the ids of the nodes retried
--         op             the operation's name, or ""
-- Returns: the run's state after the change ("staging", "running", "succeeded", "failed",
--          "cancelled", "discarded"); retry returns {state, retries}; "missing" when
--          there is no record (begin makes one).
-- An error, and nothing written, for a bad change, number or state, a commit before every
-- node is stored or of nodes whose entries break the rules (an entry that is no JSON
-- [queue, name, [upstream ids], policy], an upstream id that is no node of the run, a
-- cycle: the error names the node and the rule), a change a staging (or discarded) run
-- cannot take, a retry of a run that has not ended.

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

local change = ARGV[1]
local function refuse(why)
  return redis.error_reply('ERR workflow_record ' .. tostring(change) .. ': ' .. why)
end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local f = redis.call('HMGET', KEYS[1], 'state', 'nodes', 'deadline', 'stage_ms', 'ttl_ms',
  'cancelled', 'retries', 'error')
local state = f[1]
local DAY = 86400000

if change == 'begin' then
  local nodes = argv_whole('workflow_record', 4, 'nodes', 1, MOST)
  local stage = argv_whole('workflow_record', 5, 'stage_ms', 1, MOST)
  local ttl = argv_whole('workflow_record', 6, 'ttl_ms', 1, MOST)
  if state then
    if state == 'staging' then return state end
    return refuse('the run exists')
  end
  redis.call('HSET', KEYS[1], 'id', ARGV[2], 'name', ARGV[3], 'state', 'staging',
    'nodes', nodes, 'created_at', now, 'deadline', now + stage, 'stage_ms', stage,
    'ttl_ms', ttl, 'op', 'enqueue')
  redis.call('PEXPIRE', KEYS[1], stage + DAY)
  return 'staging'
end
if not state then return 'missing' end

if change == 'add' then
  if #ARGV % 2 ~= 1 then return refuse('takes pairs: node id, JSON') end
  if state ~= 'staging' then return refuse('the run is ' .. state) end
  for i = 2, #ARGV, 2 do
    redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1])
  end
  local stage = tonumber(f[4]) or DAY
  redis.call('HSET', KEYS[1], 'deadline', now + stage)
  redis.call('PEXPIRE', KEYS[1], stage + DAY)
  redis.call('PEXPIRE', KEYS[2], stage + DAY)
  return state
elseif change == 'commit' then
  if state == 'discarded' then
    return refuse('the run was discarded: its enqueue stalled past its deadline')
  end
  if state ~= 'staging' then return state end
  local stored = redis.call('HLEN', KEYS[2])
  if stored ~= tonumber(f[2]) then
    return refuse(string.format('%d of its %s nodes are stored', stored, f[2]))
  end
  -- Every node's entry read, its upstreams nodes of the run, and no cycle: Kahn's order,
  -- which takes each node and each edge once (a run of 100,000 nodes is one pass).
  local all = redis.call('HGETALL', KEYS[2])
  local listed = {}
  for i = 1, #all, 2 do listed[all[i]] = true end
  local waits, after, order = {}, {}, {}
  for i = 1, #all, 2 do
    local id = all[i]
    local ok, v = pcall(cjson.decode, all[i + 1])
    if not ok or type(v) ~= 'table' or type(v[1]) ~= 'string' or v[1] == ''
        or type(v[2]) ~= 'string' or type(v[3]) ~= 'table'
        or (v[4] ~= 'dead' and v[4] ~= 'run') then
      return refuse('node ' .. id .. ': its entry is no JSON [queue, name, [upstream ids],'
        .. ' "dead" or "run"]')
    end
    local seen, n = {}, 0
    for _, u in ipairs(v[3]) do
      if type(u) ~= 'string' or not listed[u] then
        return refuse('node ' .. id .. ': its upstream ' .. string.sub(tostring(u), 1, 200)
          .. ' is no node of the run')
      end
      if not seen[u] then
        seen[u] = true
        n = n + 1
        local d = after[u]
        if not d then d = {} after[u] = d end
        d[#d + 1] = id
      end
    end
    waits[id] = n
    if n == 0 then order[#order + 1] = id end
  end
  local k = 1
  while k <= #order do
    for _, d in ipairs(after[order[k]] or {}) do
      waits[d] = waits[d] - 1
      if waits[d] == 0 then order[#order + 1] = d end
    end
    k = k + 1
  end
  if #order < stored then
    local stuck = ''
    for id, n in pairs(waits) do
      if n > 0 then stuck = id break end
    end
    return refuse('its upstreams make a cycle: node ' .. stuck .. ' could never start')
  end
  redis.call('HSET', KEYS[1], 'state', 'running', 'started_at', now)
  redis.call('PERSIST', KEYS[1])
  redis.call('PERSIST', KEYS[2])
  return 'running'
elseif change == 'discard' then
  if state ~= 'staging' then return state end
  if ARGV[2] ~= 'now' and (tonumber(f[3]) or 0) > now then return state end
  redis.call('HSET', KEYS[1], 'state', 'discarded', 'ended_at', now, 'op', '')
  redis.call('PEXPIRE', KEYS[1], DAY)
  redis.call('PEXPIRE', KEYS[2], DAY)
  return 'discarded'
elseif change == 'ended' then
  if #ARGV < 3 or #ARGV % 2 ~= 1 then return refuse('takes pairs: node id, state') end
  for i = 3, #ARGV, 2 do
    if ARGV[i] ~= 'succeeded' and ARGV[i] ~= 'dead' then
      return refuse('a node ends "succeeded" or "dead"')
    end
  end
  local total = whole(f[2], 1, MOST)
  if not total then return refuse('the record has no whole number of nodes') end
  local noted = false
  for i = 2, #ARGV, 2 do
    if redis.call('HEXISTS', KEYS[2], ARGV[i]) == 1 then
      redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1])
      noted = true
    end
  end
  if not noted or state ~= 'running' or redis.call('HLEN', KEYS[3]) < total then
    return state
  end
  local final = 'succeeded'
  if f[8] then
    final = 'failed'
  elseif f[6] then
    final = 'cancelled'
  else
    for _, s in ipairs(redis.call('HVALS', KEYS[3])) do
      if s ~= 'succeeded' then final = 'failed' break end
    end
  end
  local ttl = tonumber(f[5]) or DAY
  redis.call('HSET', KEYS[1], 'state', final, 'ended_at', now)
  for i = 1, 3 do redis.call('PEXPIRE', KEYS[i], ttl) end
  redis.call('DEL', KEYS[4])
  redis.call('RPUSH', KEYS[4], final)
  redis.call('PEXPIRE', KEYS[4], ttl)
  return final
elseif change == 'cancel' then
  if state ~= 'running' then return state end
  redis.call('HSET', KEYS[1], 'cancelled', now, 'op', 'cancel')
  return state
elseif change == 'broken' then
  if state ~= 'running' then return state end
  if not f[8] then
    redis.call('HSET', KEYS[1], 'error', string.sub(ARGV[2] or '', 1, 1000))
  end
  redis.call('HSET', KEYS[1], 'cancelled', f[6] or now, 'op', 'cancel')
  return state
elseif change == 'retry' then
  if state ~= 'failed' and state ~= 'cancelled' then
    return refuse('a run is retried once it has ended failed or cancelled; it is ' .. state)
  end
  local retries = (tonumber(f[7]) or 0) + 1
  redis.call('HSET', KEYS[1], 'state', 'running', 'retries', retries, 'op', 'retry',
    'retried_at', now)
  redis.call('HDEL', KEYS[1], 'cancelled', 'ended_at', 'error')
  for i = 2, #ARGV, 1000 do
    redis.call('HDEL', KEYS[3], unpack(ARGV, i, math.min(i + 999, #ARGV)))
  end
  for i = 1, 3 do redis.call('PERSIST', KEYS[i]) end
  redis.call('DEL', KEYS[4])
  return {'running', retries}
elseif change == 'op' then
  redis.call('HSET', KEYS[1], 'op', ARGV[2] or '')
  return state
end
return refuse('unknown change')
