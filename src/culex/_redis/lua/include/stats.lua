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
local BOUNDS_MS = {5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000,
  300000}

-- An attempt's run time in ms from its hash's started_at (set by claim), or nil when that
-- is missing or not a time; 0 when the server's clock went back.
local function run_time(now_ms, started_at)
  local s = tonumber(started_at)
  if not s or s ~= s or s < 0 or s > 1e15 then return nil end
  return math.max(0, now_ms - math.floor(s))
end

-- One task of `job` ended with outcome `o` ('s', 'f' or 'd'); run_ms is its attempt's run
-- time (nil: unknown). The tally holds a table per job: run-time bucket (0 .. 14) or 'x'
-- (no run time) -> count, per outcome, and 'ms'; no string is made per task.
local function count(tally, job, o, run_ms)
  local t = tally[job]
  if not t then
    t = {s = {}, f = {}, d = {}, ms = 0}
    tally[job] = t
  end
  local b = 'x'
  if run_ms then
    b = #BOUNDS_MS
    for i = 1, #BOUNDS_MS do
      if run_ms <= BOUNDS_MS[i] then b = i - 1 break end
    end
    t.ms = t.ms + run_ms
  end
  t[o][b] = (t[o][b] or 0) + 1
end

-- Add the tally to the minute bucket <prefix>m:<start s> (kept 2 days), the hour bucket
-- <prefix>h:<start s> (kept 8 days) and <prefix>total (kept for ever), one HINCRBY per
-- field and hash. A bucket's expiry is set when a write creates one of its fields (so when
-- it creates the bucket), not on every call. pcall: a counters key that holds another type
-- is skipped; counting never stops a task's own report.
local function write_counts(prefix, now_ms, tally)
  if next(tally) == nil then return end
  local s = math.floor(now_ms / 1000)
  local minute = prefix .. 'm:' .. (s - s % 60)
  local hour = prefix .. 'h:' .. (s - s % 3600)
  local total = prefix .. 'total'
  local new_minute, new_hour = false, false
  local function add(field, n)
    new_minute = redis.pcall('HINCRBY', minute, field, n) == n or new_minute
    new_hour = redis.pcall('HINCRBY', hour, field, n) == n or new_hour
    redis.pcall('HINCRBY', total, field, n)
  end
  for job, t in pairs(tally) do
    for _, o in ipairs({'s', 'f', 'd'}) do
      for b, n in pairs(t[o]) do
        add(job .. '|' .. o .. (b == 'x' and '' or b), n)
      end
    end
    if t.ms ~= 0 then add(job .. '|ms', t.ms) end
  end
  if new_minute then redis.pcall('PEXPIRE', minute, 172800000) end
  if new_hour then redis.pcall('PEXPIRE', hour, 691200000) end
end
