#!lua
-- workflow_enqueue: store the nodes of one workflow run that live on one queue, blocked:
-- each node's task hash exists, in none of the four sets, with the set of upstream ids it
-- waits for. Nothing runs yet: workflow_resolve.lua releases a node once it waits for no
-- upstream (a node without upstreams, when the run's start is applied to it). A producer
-- sends a run's nodes in chunks, queue by queue, before workflow_record.lua's commit.
--
-- KEYS[1] task key prefix <prefix>:{<queue>}:task:   (each node's hash is <prefix><id>, its
--         upstream set <prefix>:{<queue>}:waits:<id>)
-- ARGV[1] queue          the queue name (stored in each hash)
-- ARGV[2] run            the run's id
-- ARGV[3..] the nodes, 10 values each:
--         id             the task id (any printable text without spaces, 1 to 200 bytes)
--         type           the job type
--         params         a JSON object
--         max_retries    a whole number in 0 .. 2^42 - 1
--         priority       a whole number in -100 .. 100 ("" for 0)
--         trace          the producer's trace context, "" for none
--         name           the node's name in its run
--         policy         "dead" (the node ends dead when an upstream does) or "run" (it
--                        runs once every upstream has ended, whatever their end)
--         up             a JSON list of its upstreams: [[queue, id, name], ...]
--         down           a JSON list of its downstreams: [[queue, id], ...]
--         ARGV[3] may instead be the word pair "with headers" (no id has a space): then the
--         nodes start at ARGV[4], 11 values each, the 11th the node's headers (a JSON
--         object of strings, as enqueue.lua's ARGV[13], "" for none: field `headers`)
-- Returns: the number of nodes stored; a node whose hash exists already and belongs to
-- this run is left as it is (a chunk sent twice stores nothing twice).
-- An error that names the node and the rule, and nothing written, for any node of the call
-- that breaks one: an id as above; a type of 1 to 200 bytes; params a JSON object; a
-- max_retries or priority out of its bounds; trace any text; a name of 1 to 800 bytes
-- without control characters; a policy "dead" or "run"; `up` a JSON list of
-- [queue, id, name] (queue 1 to 200 bytes, id as above, name text) and `down` of
-- [queue, id], neither naming the node itself; headers "" or a JSON object; or an id
-- whose hash exists and is not this run's. (That `up` and `down` name nodes of the run,
-- and make no cycle, is checked at the commit: workflow_record.lua.)

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

local first, size = 3, 10  -- where the nodes start, and the values of a node
if ARGV[3] == 'with headers' then
  first, size = 4, 11
end
local n = #ARGV - first + 1
if n < 0 or n % size ~= 0 then
  return redis.error_reply('ERR workflow_enqueue: ARGV is queue, run, then 10 values a node'
    .. ' (or "with headers", then 11)')
end
local function an_id(x)
  return type(x) == 'string' and x ~= '' and #x <= 200 and not string.find(x, '[%s%c]')
end
local function a_queue(x)
  return type(x) == 'string' and x ~= '' and #x <= 200
end
-- `text` as a JSON list (written with [, its keys 1 .. n), or nil.
local function json_list(text)
  if not string.find(text, '^%s*%[') then return nil end
  local ok, v = pcall(cjson.decode, text)
  if not ok or type(v) ~= 'table' then return nil end
  local n = 0
  for _ in pairs(v) do n = n + 1 end
  return n == #v and v or nil
end
-- `text` as a JSON object: a table, written with {.
local function json_object(text)
  if not string.find(text, '^%s*{') then return false end
  local ok, v = pcall(cjson.decode, text)
  return ok and type(v) == 'table'
end
local ups = {}
for i = first, #ARGV, size do
  local id = ARGV[i]
  if not an_id(id) then
    return redis.error_reply('ERR workflow_enqueue: a bad task id at ARGV[' .. i .. ']: 1 to'
      .. ' 200 bytes, no space or control character')
  end
  local function refuse(why)
    return redis.error_reply('ERR workflow_enqueue: node ' .. id .. ': ' .. why)
  end
  if ARGV[i + 1] == '' or #ARGV[i + 1] > 200 then
    return refuse('its type takes 1 to 200 bytes')
  end
  if not json_object(ARGV[i + 2]) then return refuse('its params are no JSON object') end
  argv_whole('workflow_enqueue', i + 3, 'max_retries', 0, MOST)
  argv_whole('workflow_enqueue', i + 4, 'priority', -100, 100, 0)
  local name = ARGV[i + 6]
  if name == '' or #name > 800 or string.find(name, '%c') then
    return refuse('its name takes 1 to 800 bytes, no control character')
  end
  local policy = ARGV[i + 7]
  if policy ~= 'dead' and policy ~= 'run' then
    return refuse('its policy is "dead" or "run", got "' .. string.sub(policy, 1, 40) .. '"')
  end
  local up, down = json_list(ARGV[i + 8]), json_list(ARGV[i + 9])
  if not up or not down then return refuse('its up and down are JSON lists') end
  for _, u in ipairs(up) do
    if type(u) ~= 'table' or not a_queue(u[1]) or not an_id(u[2]) or type(u[3]) ~= 'string'
        or u[4] ~= nil or u[2] == id then
      return refuse('its up holds [queue, id, name] lists, of other nodes')
    end
  end
  for _, d in ipairs(down) do
    if type(d) ~= 'table' or not a_queue(d[1]) or not an_id(d[2]) or d[3] ~= nil
        or d[2] == id then
      return refuse('its down holds [queue, id] lists, of other nodes')
    end
  end
  if size == 11 and ARGV[i + 10] ~= '' and not json_object(ARGV[i + 10]) then
    return refuse('its headers are "" or a JSON object')
  end
  local run = redis.pcall('HGET', KEYS[1] .. id, 'run')
  if type(run) == 'table' or (run and run ~= ARGV[2]) or
      (not run and redis.call('EXISTS', KEYS[1] .. id) == 1) then
    return redis.error_reply('ERR workflow_enqueue: task ' .. id .. ' exists outside run '
      .. ARGV[2])
  end
  ups[#ups + 1] = (not run) and up or false
end
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local base = string.sub(KEYS[1], 1, #KEYS[1] - 5)
local stored = 0
for k = 1, #ups do
  local i = first + (k - 1) * size
  if ups[k] then
    local key = KEYS[1] .. ARGV[i]
    redis.call('HSET', key, 'id', ARGV[i], 'type', ARGV[i + 1], 'queue', ARGV[1],
      'params', ARGV[i + 2], 'enqueue_time', now, 'retry_count', 0, 'attempt', 0,
      'max_retries', ARGV[i + 3], 'state', 'blocked', 'run', ARGV[2], 'node', ARGV[i + 6],
      'policy', ARGV[i + 7], 'up', ARGV[i + 8], 'down', ARGV[i + 9], 'on_end', '1')
    local priority = tonumber(ARGV[i + 4]) or 0
    if priority ~= 0 then
      redis.call('HSET', key, 'priority', priority)
    end
    if ARGV[i + 5] ~= '' then
      redis.call('HSET', key, 'trace', ARGV[i + 5])
    end
    if size == 11 and ARGV[i + 10] ~= '' then
      redis.call('HSET', key, 'headers', ARGV[i + 10])
    end
    for _, u in ipairs(ups[k]) do
      redis.call('SADD', base .. 'waits:' .. ARGV[i], u[2])
    end
    stored = stored + 1
  end
end
return stored
