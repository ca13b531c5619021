-- A request is over: give its lease back, and count its start in the log from the moment it
-- left the proxy rather than from the decision. Between the two lies this instance's own
-- delay (a task scheduled late, a connection opened), which may be much longer than the
-- margin and differ from one request to the next; after it, only the network's spread remains,
-- which the margin covers. A start only ever moves later (GT), so the count never loosens.
--
-- KEYS: 1 log, 2 leases. ARGV: 1 lease id, 2 ms since the request left (-1: it never left),
-- 3 the caller (a log entry is named '<lease id> <caller>').

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000

redis.call('ZREM', KEYS[2], ARGV[1])
local back = tonumber(ARGV[2])
if back >= 0 then
  redis.call('ZADD', KEYS[1], 'XX', 'GT', string.format('%.3f', now - back),
    ARGV[1] .. ' ' .. ARGV[3])
end
return 1
