-- The rules for the numbers a script takes, written once: every script that reads a number
-- from ARGV or from a hash carries a copy of this file between `-- >>> include/numbers.lua`
-- and `-- <<< include/numbers.lua`. Edit this file, then run `python -m culex._redis.assembly`
-- to refresh the copies. Not a script of its own. docs/wire-format.md (Numbers) says the
-- rules; tests/_redis/test_numbers.py sends every script every kind of bad number.

-- MOST = 2^42 - 1, the largest whole number a script takes where its header says no other
-- bound: a ready time (ms since the epoch, below 2^42: include/priority.lua), a duration in
-- ms, a count. Such a number, and the sum of two, has at most 13 digits: Lua's own number
-- to text conversion (14 digits) writes it back exactly, into a field, a score or a TTL.
local MOST = 4398046511103

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
