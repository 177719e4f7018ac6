-- Counting how tasks end, written once: complete.lua, fail.lua, reclaim.lua and claim.lua
-- each carry a copy of this file between `-- >>> include/stats.lua` and
-- `-- <<< include/stats.lua`. Edit this file, then run `python -m culex._redis.assembly` to
-- refresh the copies. Not a script of its own. The keys and fields are in
-- docs/wire-format.md; what each outcome counts is in docs/metrics.md.

-- Counters of a queue: per job type, fields <job>|succeeded, <job>|failed, <job>|dead,
-- <job>|ms (summed run time) and <job>|b0 .. <job>|b14 (how many run times fell in each
-- bucket: up to 5, 10, 25, 50, 100, 250, 500 ms, 1, 2.5, 5, 10, 30, 60, 300 s, and above).
-- A script adds what one call ended to a Lua table with count(), then writes the table
-- once with write_counts(): one HINCRBY per field and bucket hash, however many tasks.
local BOUNDS_MS = {5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000,
  300000}

-- An attempt's run time in ms from its hash's started_at (set by claim), or nil when that
-- is missing or not a time; 0 when the server's clock went back.
local function run_time(now_ms, started_at)
  local s = tonumber(started_at)
  if not s or s ~= s or s < 0 or s > 1e15 then return nil end
  return math.max(0, now_ms - math.floor(s))
end

-- One task of `job` ended with `outcome`; run_ms is its attempt's run time (nil: unknown).
local function count(tally, job, outcome, run_ms)
  local field = job .. '|' .. outcome
  tally[field] = (tally[field] or 0) + 1
  if run_ms then
    local b = #BOUNDS_MS
    for i = 1, #BOUNDS_MS do
      if run_ms <= BOUNDS_MS[i] then b = i - 1 break end
    end
    field = job .. '|b' .. b
    tally[field] = (tally[field] or 0) + 1
    field = job .. '|ms'
    tally[field] = (tally[field] or 0) + run_ms
  end
end

-- Add the tally to the minute bucket <prefix>m:<start s> (kept 2 days), the hour bucket
-- <prefix>h:<start s> (kept 8 days) and <prefix>total (kept for ever). pcall: a counter
-- key that holds another type is skipped; counting never stops a task's own report.
local function write_counts(prefix, now_ms, tally)
  if next(tally) == nil then return end
  local s = math.floor(now_ms / 1000)
  local minute = prefix .. 'm:' .. (s - s % 60)
  local hour = prefix .. 'h:' .. (s - s % 3600)
  local total = prefix .. 'total'
  for field, n in pairs(tally) do
    redis.pcall('HINCRBY', minute, field, n)
    redis.pcall('HINCRBY', hour, field, n)
    redis.pcall('HINCRBY', total, field, n)
  end
  redis.pcall('PEXPIRE', minute, 172800000)
  redis.pcall('PEXPIRE', hour, 691200000)
end
