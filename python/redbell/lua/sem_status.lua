-- sem_status: a consistent snapshot of one semaphore, for operators.
-- Read-only.
--
-- KEYS[1]  holders  P:{N}:holders       sorted set: token -> expiry (server ms)
-- KEYS[2]  fence    P:{N}:fence         string: fencing counter
-- KEYS[3]  expiry   P:{N}:queue:expiry  sorted set: member -> expiry (server ms)
-- KEYS[4]  count    P:{N}:permits       string: the permit count
-- ARGV[1]  version  the protocol version, "1" (protocol.lua)
--
-- Returns {permits, fence, waiters, token1, ms1, token2, ms2, ...}:
--   permits  the stored permit count ("" when none is stored)
--   fence    the last fence handed out ("" if none is remembered)
--   waiters  queue entries not yet expired (server time)
--   tokenK, msK  each live holder's token and remaining lease in ms,
--                the earliest to expire first
--   error WRONGTYPE  a key holds foreign data
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {
  redis.call('GET', KEYS[4]) or '',
  redis.call('GET', KEYS[2]) or '',
  redis.call('ZCOUNT', KEYS[3], '(' .. now_ms, '+inf'),
}
local live = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now_ms, '+inf', 'WITHSCORES')
for i = 1, #live, 2 do
  out[#out + 1] = live[i]
  out[#out + 1] = tonumber(live[i + 1]) - now_ms
end
return out
