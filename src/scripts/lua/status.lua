-- status: a consistent snapshot of one lock, for operators. Read-only.
--
-- KEYS[1]  lock key      P:{N}
-- KEYS[2]  fence key     P:{N}:fence
-- KEYS[3]  waiter queue  P:{N}:waiters            (plain mutex: member -> expiry)
-- KEYS[4]  fair expiry   P:{N}:fifo:expiry        (fair mutex: member -> expiry)
--
-- Returns {holder, pttl, fence, waiters}:
--   holder   the owner token, or "" when the lock is free (or only reserved,
--            "m:<member>@<end>", for the waiter a release just woke)
--   pttl     remaining lease in ms (-2: free, -1: no expiry)
--   fence    the last fence handed out ("" if none is remembered)
--   waiters  queue entries not yet expired (server time), both kinds
--   error WRONGTYPE  the lock key or the queue has the wrong type
local holder = redis.call('GET', KEYS[1]) or ''
local pttl = redis.call('PTTL', KEYS[1])
if string.sub(holder, 1, 2) == 'm:' then
  holder, pttl = '', -2
end
local fence = redis.call('GET', KEYS[2]) or ''
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local waiters = redis.call('ZCOUNT', KEYS[3], '(' .. now_ms, '+inf')
    + redis.call('ZCOUNT', KEYS[4], '(' .. now_ms, '+inf')
return {holder, pttl, fence, waiters}
