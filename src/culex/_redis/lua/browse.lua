#!lua flags=no-writes
-- browse: one page of the tasks of one state, read from its sorted set by score (the set is
-- the index: nothing scans task hashes). Writes nothing. A page goes on from a cursor, the
-- (score, id) of the last id the page before looked at, so it is stable while tasks come
-- and go: ids after the cursor in the set's order (score, then id byte by byte) are next,
-- whether or not the cursor's own id is still there. With a job type, ids are looked at
-- one by one (HMGET type) and only those of that type are rows, up to `examine` ids: a page
-- may then hold fewer rows than `limit` (none at all), with a cursor to go on from. A
-- search (ARGV[8]) and a kind (ARGV[9]) look at ids the same way, within the same bound.
--
-- KEYS[1] the state's zset  <prefix>:{<queue>}:waiting, :scheduled, :pending or :dead, or
--                           :succeeded (the recent successes, kept by complete.lua)
-- KEYS[2] task key prefix   <prefix>:{<queue>}:task:
-- ARGV[1] order             "asc" (lowest score first: oldest) or "desc" (newest first)
-- ARGV[2] after_score       the cursor's score (a finite number, or inf or -inf, which an
--                           older producer may have stored), or "" for the first page
-- ARGV[3] after_id          the cursor's id ("" with no cursor)
-- ARGV[4] limit             rows at most (> 0; this and the other counts whole numbers, at
--                           most 2^42 - 1: include/numbers.lua)
-- ARGV[5] examine           ids looked at at most (>= limit)
-- ARGV[6] job               a job type: only its tasks are rows; "" for every task
-- ARGV[7] cut               bytes kept of last_error and of params (> 0)
-- ARGV[8] search            optional: only tasks whose id begins with this text, or whose
--                           type, params or last_error holds it (plain bytes, case as
--                           written); "" or none: every task
-- ARGV[9] kind              optional: "retrying" (only tasks with retry_count or stalls
--                           above 0: in scheduled, those waiting out a retry's back-off),
--                           "delayed" (only the others), "" or none: every task
-- ARGV[10] state            optional: only tasks whose hash says this state (the succeeded
--                           zset may name an id whose hash expired and was used again);
--                           "" or none: any. With "succeeded", an id whose hash is gone
--                           (expired: a success is kept for a short time) is a row all the
--                           same, with its id and score alone, unless a job, a kind or a
--                           search that its id does not begin with leaves it out
-- Returns: {total, looked, next_score, next_id, row, row, ...}: total = ZCARD of the zset;
--          looked = how many ids the page looked at; next_score and next_id: the cursor of the next page (the last id looked at),
--          both "" when the set holds no more ids in this order; each row
--          {id, score, type, enqueue_time, retry_count, last_error, params, priority, group},
--          missing fields as "". An id whose hash is gone (or is not a hash) is never a row
--          (but for ARGV[10] "succeeded", above).
--          In waiting the score is ready_ms - priority * 2^42 (include/priority.lua): "asc"
--          is the order the tasks run in (highest priority first, then earliest ready),
--          "desc" its reverse.
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

local asc = ARGV[1] == 'asc'
local limit = argv_whole('browse', 4, 'limit', 1, MOST)
local examine = argv_whole('browse', 5, 'examine', 1, MOST)
local cut = argv_whole('browse', 7, 'cut', 1, MOST)
local after = ARGV[2] ~= '' and tonumber(ARGV[2])
-- (inf and -inf too: a score an older producer stored, which a page must be able to pass)
local infinite = ARGV[2] == 'inf' or ARGV[2] == '-inf' or ARGV[2] == '+inf'
if (ARGV[1] ~= 'asc' and ARGV[1] ~= 'desc') or (ARGV[2] ~= '' and not infinite
    and not (after and after == after and math.abs(after) < math.huge)) then
  return redis.error_reply('ERR browse: ARGV[1] order must be asc or desc, ARGV[2] after_score '
    .. '"", a finite number, inf or -inf')
end
local set, job = KEYS[1], ARGV[6]
local search, kind, state = ARGV[8] or '', ARGV[9] or '', ARGV[10] or ''
if kind ~= '' and kind ~= 'retrying' and kind ~= 'delayed' then
  return redis.error_reply('ERR browse: ARGV[9] kind must be retrying, delayed or ""')
end

-- a < b byte by byte, as the zset orders equal scores (Lua's < follows the locale)
local function less(a, b)
  for i = 1, math.min(#a, #b) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      return x < y
    end
  end
  return #a < #b
end

-- The rank (lowest first) of the first id with the cursor's score that comes after the
-- cursor's id (asc) or that does not come before it (desc): a binary search within the
-- ids of that score, each probe a ZRANGE by rank.
local function rank_after(score, id)
  local lo = redis.call('ZCOUNT', set, '-inf', '(' .. score)
  local hi = redis.call('ZCOUNT', set, '-inf', score)
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    local member = redis.call('ZRANGE', set, mid, mid)[1]
    local past
    if asc then past = less(id, member) else past = not less(member, id) end
    if past then hi = mid else lo = mid + 1 end
  end
  return lo
end

local total = redis.call('ZCARD', set)
local pos  -- the rank of the next id to look at
if not after then
  pos = asc and 0 or total - 1
else
  pos = rank_after(ARGV[2], ARGV[3])
  if not asc then pos = pos - 1 end
end

local function row(id, score)
  local key = KEYS[2] .. id
  if job ~= '' then
    local t = redis.pcall('HGET', key, 'type')
    if t ~= job then return nil end
  end
  local f = redis.pcall('HMGET', key, 'type', 'enqueue_time', 'retry_count', 'last_error',
    'params', 'priority', 'group', 'stalls', 'state')
  if state == 'succeeded' and not f['err'] and not f[1] and not f[9] and job == ''
      and kind == '' and string.sub(id, 1, #search) == search then
    return {id, score, '', '', '', '', '', '', ''}  -- (a success whose hash has expired)
  end
  if f['err'] or not f[1] or (state ~= '' and f[9] ~= state) then return nil end
  if search ~= '' and string.sub(id, 1, #search) ~= search
      and not string.find(f[1], search, 1, true)
      and not string.find(f[5] or '', search, 1, true)
      and not string.find(f[4] or '', search, 1, true) then
    return nil
  end
  if kind ~= '' then
    -- (a count that is no number counts as 0)
    local again = (tonumber(f[3] or '') or 0) > 0 or (tonumber(f[8] or '') or 0) > 0
    if again ~= (kind == 'retrying') then return nil end
  end
  return {id, score, f[1], f[2] or '', f[3] or '', string.sub(f[4] or '', 1, cut),
    string.sub(f[5] or '', 1, cut), f[6] or '', f[7] or ''}
end

local reply = {total, 0, '', ''}
local rows, looked, last_score, last_id = 0, 0, nil, nil
local chunk = (job == '' and search == '' and kind == '') and limit or 500
while rows < limit and looked < examine and pos >= 0 and pos < total do
  local want = math.min(chunk, examine - looked)
  local first, final = pos, pos + want - 1
  if not asc then first, final = math.max(0, pos - want + 1), pos end
  local got = redis.call('ZRANGE', set, first, final, 'WITHSCORES')
  local from, to, step = 1, #got - 1, 2
  if not asc then from, to, step = #got - 1, 1, -2 end
  for i = from, to, step do
    looked = looked + 1
    last_id, last_score = got[i], got[i + 1]
    pos = asc and pos + 1 or pos - 1
    local found = row(last_id, last_score)
    if found then
      reply[#reply + 1] = found
      rows = rows + 1
      if rows == limit then break end
    end
  end
end
reply[2] = looked
if last_id and pos >= 0 and pos < total then
  reply[3], reply[4] = last_score, last_id
end
return reply
