#!lua
-- log: lines a task's job wrote with self.log(), kept with the task (the hash's field `logs`,
-- so they expire with it). A runner buffers an attempt's lines and sends them here with
-- its heartbeat and before the attempt's report, so a job that logs in a loop costs no
-- round trip a line (culex.jobs.task_logs).
--
-- KEYS[1] task hash
-- ARGV[1] attempt         fences stale runners: only the task's current attempt writes
-- ARGV[2..] lines         each a JSON object {"attempt": n, "n": its place in the attempt
--                         (1, 2, ...), "at": ms since the epoch (the runner's clock),
--                         "line": text of at most 4000 bytes}
-- Returns: how many lines are kept now; 0 when refused (the task's attempt is another: its
--          lease was lost and it was handed out again, or it has no hash). The hash's
--          `logs` is a JSON array of such objects, in order by (attempt, n), the newest
--          100 (KEPT): a line sent twice (a report sent again) is kept once, and lines that
--          come late (a heartbeat's, after the report's) take their place in order. An
--          error, and nothing written, when a line is not such an object or too long.
-- The attempt's state does not matter: a heartbeat's lines may land after its report.
local KEPT = 100
if #ARGV < 2 then
  return redis.error_reply('ERR log: ARGV[1] attempt and at least one line')
end
local new = {}
for i = 2, #ARGV do
  local ok, line = pcall(cjson.decode, ARGV[i])
  if not ok or type(line) ~= 'table' or type(line.line) ~= 'string' or #line.line > 4000
      or type(line.n) ~= 'number' or type(line.at) ~= 'number'
      or tostring(line.attempt) ~= ARGV[1] then
    return redis.error_reply('ERR log: ARGV[' .. i .. '] must be a JSON object {attempt '
      .. '(ARGV[1]), n, at, line (at most 4000 bytes)}')
  end
  new[#new + 1] = line
end
if redis.call('HGET', KEYS[1], 'attempt') ~= ARGV[1] then
  return 0
end
-- (a field another writer spoiled is started again: the lines must not stop on it)
local kept = {}
local stored = redis.call('HGET', KEYS[1], 'logs')
if stored then
  local ok, old = pcall(cjson.decode, stored)
  if ok and type(old) == 'table' then kept = old end
end
local seen = {}
for _, line in ipairs(kept) do
  if type(line) == 'table' then seen[tostring(line.attempt) .. ':' .. tostring(line.n)] = true end
end
for _, line in ipairs(new) do
  local key = ARGV[1] .. ':' .. tostring(line.n)
  if not seen[key] then
    seen[key] = true
    kept[#kept + 1] = line
  end
end
local function place(line)
  return type(line) == 'table' and (tonumber(line.attempt) or 0), type(line) == 'table'
    and (tonumber(line.n) or 0)
end
table.sort(kept, function(a, b)
  local aa, an = place(a)
  local ba, bn = place(b)
  if aa ~= ba then return aa < ba end
  return an < bn
end)
local from = math.max(1, #kept - KEPT + 1)
local last = {}
for i = from, #kept do last[#last + 1] = kept[i] end
redis.call('HSET', KEYS[1], 'logs', cjson.encode(last))
return #last
