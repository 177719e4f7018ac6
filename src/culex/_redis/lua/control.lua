#!lua
-- control: pause or resume a queue, or set its limits at run time (culex.pause, resume,
-- limit); read by every claim of the queue (claim.lua, KEYS[8]).
--
-- KEYS[1] control hash <prefix>:{<queue>}:control
-- KEYS[2] signal list  <prefix>:{<queue>}:signal   (a change wakes one idle runner, so a
--         resumed queue, or one whose limit was raised, starts at once)
-- ARGV[1..] pairs: field, value. Fields: paused ("1"), rate and rate_ms (set together:
--         the most starts in any window of rate_ms ms; rate "0": no rate limit),
--         concurrency (the most tasks pending at once; "0": no limit), and the same per
--         group: group_rate with group_rate_ms, group_concurrency. A value "" removes the
--         field: the claim then uses what the queue's job classes declare.
-- Returns: the control hash after the change, as field, value pairs (without the claim's
--          own mark, blocked). An error, and nothing written, for an unknown field, a
--          value that is not a whole number (paused: only "1"), rate without rate_ms, or
--          rate_ms < 1 with a rate.
local known = {paused = true, rate = true, rate_ms = true, concurrency = true,
  group_rate = true, group_rate_ms = true, group_concurrency = true}
if #ARGV % 2 ~= 0 then
  return redis.error_reply('ERR control: ARGV must be field, value pairs')
end
local given = {}
for i = 1, #ARGV, 2 do
  local field, value = ARGV[i], ARGV[i + 1]
  if not known[field] then
    return redis.error_reply('ERR control: unknown field ' .. field)
  end
  if value ~= '' and not (string.match(value, '^%d+$') and #value <= 15) then
    return redis.error_reply('ERR control: ' .. field .. ' must be a whole number, got ' .. value)
  end
  if field == 'paused' and value ~= '' and value ~= '1' then
    return redis.error_reply('ERR control: paused is "1" or ""')
  end
  given[field] = value
end
for _, name in ipairs({'rate', 'group_rate'}) do
  local count, window = given[name], given[name .. '_ms']
  if (count == nil) ~= (window == nil) or (count == '') ~= (window == '') then
    return redis.error_reply('ERR control: ' .. name .. ' and ' .. name .. '_ms are set together')
  end
  if count and count ~= '' and count ~= '0' and tonumber(window) < 1 then
    return redis.error_reply('ERR control: ' .. name .. '_ms must be >= 1 with a ' .. name)
  end
end
for i = 1, #ARGV, 2 do
  if ARGV[i + 1] == '' then
    redis.call('HDEL', KEYS[1], ARGV[i])
  else
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
  end
end
if redis.call('LLEN', KEYS[2]) == 0 then
  redis.call('RPUSH', KEYS[2], '1')
end
local out = {}
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  if all[i] ~= 'blocked' then
    out[#out + 1] = all[i]
    out[#out + 1] = all[i + 1]
  end
end
return out
