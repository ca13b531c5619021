-- One decision for one request: may it start now, and if not, how long must it wait?
-- Atomic (Redis runs a script alone), on Redis's own clock, so every proxy instance sees one
-- count and no instance's clock matters. The rule is written out in src/proxy/rule.rs; the
-- in-memory store (src/proxy/memory_store.rs) carries out the same rule for one instance.
--
-- KEYS: 1 log (zset: per start, the latest instant it can reach the upstream), 2 gcra (hash:
-- window -> theoretical arrival time), 3 leases (zset: '<lease id> <caller>' -> expiry), 4 callers (hash: caller -> usage record),
-- 5 pause (string: paused until), 6 learned (hash: window -> limit the upstream stated),
-- 7 marker (string: set once; its absence means a new or restarted, empty Redis)
-- ARGV: 1 caller, 2 lease id, 3 lease ms, 4 concurrency, 5 algorithm ('log' or 'gcra'),
-- 6 margin ms, 7 concurrency re-ask ms, 8 number of windows, then limit and length ms for each.
--
-- Returns {granted 0/1, wait ms (rounded up), reason, share, used, callers, share window ms}.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000

local caller, lease_id = ARGV[1], ARGV[2]
local lease_ms, concurrency = tonumber(ARGV[3]), tonumber(ARGV[4])
local algorithm, margin = ARGV[5], tonumber(ARGV[6])
local reask_ms = tonumber(ARGV[7])
local n = tonumber(ARGV[8])

-- Scores and stored instants are written with three decimals (microseconds): Lua's own
-- tostring keeps 14 digits, which rounds a millisecond timestamp to 10 us.
local function fmt(x) return string.format('%.3f', x) end

-- The log carries the margin in its entries (a start under way is logged where it may arrive
-- at the latest, see below); GCRA, which keeps no starts, stretches its windows by it instead.
local stretch = 0
if algorithm == 'gcra' then stretch = margin end
local limits, lengths = {}, {}
local longest, fair = 0, 1
for i = 1, n do
  limits[i] = tonumber(ARGV[7 + 2 * i])
  lengths[i] = tonumber(ARGV[8 + 2 * i]) + stretch
  local learned = redis.call('HGET', KEYS[6], tostring(i))
  if learned and tonumber(learned) < limits[i] then limits[i] = tonumber(learned) end
  if lengths[i] > longest then longest = lengths[i] end
  if lengths[i] < lengths[fair] then fair = i end
end

-- A Redis that lost the count (new, restarted empty, flushed) cannot know what was sent in the
-- last window: the budget counts as used to the full at this instant (and what was sent
-- before it may still arrive as late as the margin allows).
if redis.call('EXISTS', KEYS[7]) == 0 then
  local fresh = longest - stretch + margin
  redis.call('SET', KEYS[7], fmt(now))
  redis.call('SET', KEYS[5], fmt(now + fresh), 'PX', math.ceil(fresh))
end

-- Fair shares over the shortest window: every caller that asked within it is active; each is
-- owed floor(limit / active) starts per window. Usage is counted exactly from the log; under
-- GCRA (no log) it is estimated from two fixed buckets per caller (the current one and the one
-- before, weighted by its overlap with the sliding window). The limit itself is enforced
-- exactly, below.
-- (A Lua loop visits every active caller: fine for hundreds, not for millions.)
local fair_len, fair_limit = lengths[fair], limits[fair]
-- Under the log, each caller's starts in the window are counted exactly from it: a log entry
-- is named '<lease id> <caller>'.
-- A caller turned away for its share may ask again when anything the step reads changes: a
-- start leaving the window or another caller going inactive (under GCRA: after one interval).
local exact, next_change = nil, nil
if algorithm ~= 'gcra' then
  exact = {}
  local members = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. fmt(now - fair_len), '+inf',
    'WITHSCORES')
  for j = 1, #members, 2 do
    local who = string.match(members[j], '^[^ ]* (.*)$')
    if who then exact[who] = (exact[who] or 0) + 1 end
    if j == 1 then next_change = tonumber(members[j + 1]) + fair_len end
  end
end
local records = redis.call('HGETALL', KEYS[4])
local others, active, total = {}, 0, 0
local mine = nil
for j = 1, #records, 2 do
  local name, rec = records[j], records[j + 1]
  local ws, cur, prev, last = string.match(rec, '^([%d%.]+):(%d+):(%d+):([%d%.]+)$')
  ws, cur, prev, last = tonumber(ws), tonumber(cur), tonumber(prev), tonumber(last)
  if ws == nil or last <= now - fair_len then
    redis.call('HDEL', KEYS[4], name)
  else
    if now >= ws + fair_len then
      local k = math.floor((now - ws) / fair_len)
      if k == 1 then prev = cur else prev = 0 end
      cur = 0
      ws = ws + k * fair_len
    end
    local used
    if exact then used = exact[name] or 0 else used = prev * (1 - (now - ws) / fair_len) + cur end
    if name == caller then
      mine = { ws = ws, cur = cur, prev = prev, used = used }
    else
      others[#others + 1] = used
      if exact and (next_change == nil or last + fair_len < next_change) then
        next_change = last + fair_len
      end
    end
    active = active + 1
    total = total + used
  end
end
if mine == nil then
  mine = { ws = now, cur = 0, prev = 0, used = (exact and exact[caller]) or 0 }
  active = active + 1
end
local share = math.max(1, math.floor(fair_limit / active))

local function save_caller()
  redis.call('HSET', KEYS[4], caller,
    string.format('%.3f:%d:%d:%.3f', mine.ws, mine.cur, mine.prev, now))
  redis.call('PEXPIRE', KEYS[4], math.ceil(2 * fair_len) + 1000)
end

local function deny(wait, reason)
  save_caller()
  return { 0, math.max(1, math.ceil(wait)), reason, share, math.floor(mine.used), active,
    math.ceil(fair_len) }
end

local paused = tonumber(redis.call('GET', KEYS[5]) or '0')
if paused > now then return deny(paused - now, 'paused') end

redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', fmt(now))
if redis.call('ZCARD', KEYS[3]) >= concurrency then
  -- The lease that frees first may be released any moment (or expire): ask again soon.
  return deny(reask_ms, 'concurrency')
end

local wait = 0
-- What the fair-share step may hand out: exact from the log, estimated under GCRA.
local counted = total
-- Requests still unanswered past the latest arrival their decision logged may reach the
-- upstream any moment: until answered they count as arriving now. A live lease is named as
-- its start in the log ('<lease id> <caller>').
local overdue = {}
if algorithm ~= 'gcra' then
  for _, member in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
    local at = redis.call('ZSCORE', KEYS[1], member)
    if at and tonumber(at) <= now then overdue[#overdue + 1] = tonumber(at) end
  end
end
for i = 1, n do
  if algorithm == 'gcra' then
    -- Starts spaced by length / limit with no burst: any half-open window of the length then
    -- holds at most the limit (a burst tolerance would allow up to twice that).
    local tat = tonumber(redis.call('HGET', KEYS[2], tostring(i)) or '0')
    if tat > now then wait = math.max(wait, tat - now) end
  else
    -- Exact log: a start is allowed once the limit-th latest arrival logged is a whole window
    -- old (entries of starts under way lie up to a margin ahead of now).
    local from = '(' .. fmt(now - lengths[i])
    local logged = redis.call('ZCOUNT', KEYS[1], from, '+inf')
    -- Overdue starts the window no longer holds by their logged instant.
    local held = 0
    for _, at in ipairs(overdue) do
      if at <= now - lengths[i] then held = held + 1 end
    end
    local count = logged + held
    if i == fair then counted = count end
    if count >= limits[i] then
      -- The window frees when its (count - limit)-th oldest start leaves it: in order, those
      -- logged before now, the held ones (at now, until answered: ask again soon), then those
      -- logged at or after now.
      local nth = count - limits[i]
      local before_now = redis.call('ZCOUNT', KEYS[1], from, '(' .. fmt(now))
      local frees_in
      if nth >= before_now and nth < before_now + held then
        frees_in = reask_ms
      else
        if nth >= before_now then nth = nth - held end
        local oldest = redis.call('ZRANGEBYSCORE', KEYS[1], from, '+inf', 'WITHSCORES', 'LIMIT',
          nth, 1)
        frees_in = tonumber(oldest[2]) + lengths[i] - now
      end
      wait = math.max(wait, frees_in)
    end
  end
end
if wait > 0 then return deny(wait, 'limit') end

-- Beyond its share a caller may borrow only what leaves every other active caller's unused
-- share free, so a busy caller cannot starve one that asks less often.
if mine.used + 1 > share then
  local owed = 0
  for _, used in ipairs(others) do
    if used < share then owed = owed + (share - used) end
  end
  -- Ties are common (the same estimates summed in different orders): 1e-6 is TIE in
  -- rule.rs, so rounding breaks them alike here and there.
  if fair_limit - counted - 1 < owed - 1e-6 then
    local again = fair_len / fair_limit
    if next_change then again = next_change - now end
    return deny(again, 'fair-share')
  end
end

if algorithm == 'gcra' then
  for i = 1, n do
    local tat = tonumber(redis.call('HGET', KEYS[2], tostring(i)) or '0')
    redis.call('HSET', KEYS[2], tostring(i), fmt(math.max(tat, now) + lengths[i] / limits[i]))
  end
  redis.call('PEXPIRE', KEYS[2], math.ceil(longest) + 1000)
else
  -- Where it may arrive at the latest while its trip stays within the margin; its answer may
  -- move it later (finish.lua).
  redis.call('ZADD', KEYS[1], fmt(now + margin), lease_id .. ' ' .. caller)
  -- Kept for twice the longest window (instances log starts with margins of their own), and
  -- as long as a lease lives: an unanswered start counts.
  local kept = math.max(2 * longest, lease_ms)
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. fmt(now - kept))
  redis.call('PEXPIRE', KEYS[1], math.ceil(kept) + 1000)
end
redis.call('ZADD', KEYS[3], fmt(now + lease_ms), lease_id .. ' ' .. caller)
redis.call('PEXPIRE', KEYS[3], lease_ms + 1000)
mine.cur = mine.cur + 1
mine.used = mine.used + 1
save_caller()
return { 1, 0, 'ok', share, math.floor(mine.used), active, math.ceil(fair_len) }
