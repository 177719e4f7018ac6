-- Counting how tasks end, written once: complete.lua, fail.lua, reclaim.lua and claim.lua
-- each carry a copy of this file between `-- >>> include/stats.lua` and
-- `-- <<< include/stats.lua`. Edit this file, then run `python -m culex._redis.assembly` to
-- refresh the copies. Not a script of its own. The keys and fields are in
-- docs/wire-format.md; what each outcome counts is in docs/metrics.md.

-- Counters of a queue, per job type: <job>|<o><b> counts the attempts that ended with
-- outcome <o> (s succeeded, f failed, d dead) and a run time in bucket <b> (0 .. 13: up to
-- 5, 10, 25, 50, 100, 250, 500 ms, 1, 2.5, 5, 10, 30, 60, 300 s; 14: above), <job>|<o>
-- those with no run time known; <job>|ms sums the run times. A script adds what one call
-- ended to a Lua table with count(), then writes it once with write_counts(): one HINCRBY
-- per field and hash, however many tasks, and none for a sum that stayed 0.
-- An attempt's run time in ms from its hash's started_at (set by claim), or nil when that
-- is missing or not a time; 0 when the server's clock went back.
local function run_time(now_ms, started_at)
  local s = tonumber(started_at)
  if not s or s ~= s or s < 0 or s > 1e15 then return nil end
  return math.max(0, now_ms - math.floor(s))
end

-- The run-time bucket of run_ms: 0 .. 13 for at most 5, 10, 25, 50, 100, 250, 500 ms, 1,
-- 2.5, 5, 10, 30, 60, 300 s, 14 above (no table: this runs for every task).
local function bucket(ms)
  if ms <= 100 then
    if ms <= 5 then return 0 elseif ms <= 10 then return 1 elseif ms <= 25 then return 2
    elseif ms <= 50 then return 3 else return 4 end
  elseif ms <= 5000 then
    if ms <= 250 then return 5 elseif ms <= 500 then return 6 elseif ms <= 1000 then return 7
    elseif ms <= 2500 then return 8 else return 9 end
  elseif ms <= 10000 then return 10 elseif ms <= 30000 then return 11
  elseif ms <= 60000 then return 12 elseif ms <= 300000 then return 13 end
  return 14
end

-- One task of `job` ended with outcome `o` ('s', 'f' or 'd'); run_ms is its attempt's run
-- time (nil: unknown). The tally holds a table per job: per outcome, run-time bucket (or
-- 'x': no run time) -> count; and 'ms', the summed run time. No string is made per task.
local function count(tally, job, o, run_ms)
  local t = tally[job]
  if not t then
    t = {s = {}, f = {}, d = {}, ms = 0}
    tally[job] = t
  end
  local b = 'x'
  if run_ms then
    b = bucket(run_ms)
    t.ms = t.ms + run_ms
  end
  t[o][b] = (t[o][b] or 0) + 1
end

-- The tally as a list: field, count, field, count, ...
local function flat(tally)
  local out = {}
  for job, t in pairs(tally) do
    for o, counts in pairs({s = t.s, f = t.f, d = t.d}) do
      for b, n in pairs(counts) do
        out[#out + 1] = job .. '|' .. o .. (b == 'x' and '' or b)
        out[#out + 1] = n
      end
    end
    if t.ms ~= 0 then
      out[#out + 1] = job .. '|ms'
      out[#out + 1] = t.ms
    end
  end
  return out
end

-- Add the minute bucket <prefix>m:<start> to its hour bucket <prefix>h:<start of hour> and
-- to <prefix>total: the minute has ended, and no script writes to it again. The hour
-- expires 8 days after, the minute 2 days after.
local function fold(prefix, start, total)
  local minute = prefix .. 'm:' .. start
  local f = redis.pcall('HGETALL', minute)
  if f['err'] then return end
  local hour = prefix .. 'h:' .. (start - start % 3600)
  for i = 1, #f, 2 do
    redis.pcall('HINCRBY', hour, f[i], f[i + 1])
    redis.pcall('HINCRBY', total, f[i], f[i + 1])
  end
  redis.pcall('PEXPIRE', hour, 691200000)
  redis.pcall('PEXPIRE', minute, 172800000)
end

-- Add the tally to the minute bucket <prefix>m:<start s>, one HINCRBY per field, however
-- many tasks. The hour bucket and <prefix>total get a minute once it has ended: the first
-- write that makes a field in a later minute folds the one that <prefix>total's field
-- `minute` names into them, and names its own (the reads add the minute not yet folded).
-- A minute expires 2 days after it was folded. pcall: a counters key that holds another
-- type is skipped; counting never stops a task's own report.
local function write_counts(prefix, now_ms, tally)
  if next(tally) == nil then return end
  local s = math.floor(now_ms / 1000)
  local start = s - s % 60
  local minute = prefix .. 'm:' .. start
  local made = false
  local counts = flat(tally)
  for i = 1, #counts, 2 do
    made = redis.pcall('HINCRBY', minute, counts[i], counts[i + 1]) == counts[i + 1] or made
  end
  if not made then return end  -- (the minute and its fields were there: nothing to fold)
  local total = prefix .. 'total'
  local last = tonumber(redis.pcall('HGET', total, 'minute'))
  if not last or last < start then
    if last then fold(prefix, last, total) end
    local named = redis.pcall('HSET', total, 'minute', start)
    if type(named) == 'table' and named['err'] then  -- (no totals: the minute must end)
      redis.pcall('PEXPIRE', minute, 172800000)
    end
  elseif last > start then
    -- The server's clock went back to a minute that is folded or will never be: this
    -- call's counts go to its hour and the totals at once.
    local hour = prefix .. 'h:' .. (start - start % 3600)
    for i = 1, #counts, 2 do
      redis.pcall('HINCRBY', hour, counts[i], counts[i + 1])
      redis.pcall('HINCRBY', total, counts[i], counts[i + 1])
    end
    redis.pcall('PEXPIRE', hour, 691200000)
    redis.pcall('PEXPIRE', minute, 172800000)
  end
end
