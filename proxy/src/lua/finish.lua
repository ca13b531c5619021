-- A request is over: give its lease back, and count its start in the log where it can have
-- reached the upstream at the latest (its answer less the fastest trip the instance measured;
-- its end when it failed) when that is later than where its decision logged it (the decision
-- plus the instance's margin): between the decision and the arrival lie the instance's own
-- delays (a task scheduled late, a connection opened) and the network's, which may be longer
-- than the margin. A start only ever moves later (GT), so the count never loosens; one placed
-- within the margin keeps the margin's place.
--
-- KEYS: 1 log, 2 leases. ARGV: 1 lease id, 2 how many ms before now to count it (-1: it
-- never left; it stays where its decision logged it), 3 the caller (an entry is
-- '<lease id> <caller>').

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000

redis.call('ZREM', KEYS[2], ARGV[1] .. ' ' .. ARGV[3])
local back = tonumber(ARGV[2])
if back >= 0 then
  redis.call('ZADD', KEYS[1], 'XX', 'GT', string.format('%.3f', now - back),
    ARGV[1] .. ' ' .. ARGV[3])
end
return 1
