-- What the upstream said about the shared budget, applied for every instance at once: a 429
-- (or 503 with Retry-After) pauses the budget; a stated limit lower than the configured one
-- retunes it until the upstream stops stating it.
--
-- KEYS: 1 pause (string: paused until), 2 learned (hash: window -> limit)
-- ARGV: 1 rate limited 0/1, 2 wait ms (-1: none stated), 3 default pause ms,
-- 4 stated limit (-1: none), 5 stated window ms (-1: none), 6 learned ttl ms,
-- 7 number of windows, then each window's configured limit and length ms.
--
-- Returns the ms the budget stays paused (0: not paused).

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000

local rate_limited, wait = ARGV[1] == '1', tonumber(ARGV[2])
local default_pause, stated, stated_window = tonumber(ARGV[3]), tonumber(ARGV[4]),
  tonumber(ARGV[5])
local learned_ttl, n = tonumber(ARGV[6]), tonumber(ARGV[7])

if stated > 0 then
  -- The window the statement is about: the one of that length, else the shortest.
  local pick, shortest = nil, nil
  for i = 1, n do
    local limit, length = tonumber(ARGV[6 + 2 * i]), tonumber(ARGV[7 + 2 * i])
    if length == stated_window then pick = i end
    if shortest == nil or length < tonumber(ARGV[7 + 2 * shortest]) then shortest = i end
  end
  pick = pick or shortest
  if stated < tonumber(ARGV[6 + 2 * pick]) then
    redis.call('HSET', KEYS[2], tostring(pick), stated)
    redis.call('PEXPIRE', KEYS[2], learned_ttl)
  end
end

local paused = tonumber(redis.call('GET', KEYS[1]) or '0')
if rate_limited then
  if wait < 0 then wait = default_pause end
  if now + wait > paused then
    paused = now + wait
    redis.call('SET', KEYS[1], string.format('%.3f', paused), 'PX', math.max(1, math.ceil(wait)))
  end
end
if paused > now then return math.ceil(paused - now) end
return 0
