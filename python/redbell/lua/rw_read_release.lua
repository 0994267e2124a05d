-- rw_read_release: drop one reader's hold; the last reader out wakes the
-- lock's waiters (a waiting writer).
--
-- KEYS[1]  readers  P:{N}:readers   sorted set: reader token -> expiry ms
-- KEYS[2]  channel  P:{N}:rw        the read-write lock's release channel
-- KEYS[3]  intents  P:{N}:writers   sorted set: waiting writer -> expiry ms
-- ARGV[1]  version  the protocol version, "1" (protocol.lua)
-- ARGV[2]  token    the reader's owner token
-- ARGV[3]  window_ms  how long a woken writer's intent lasts unless it
--                     attempts (renewing it)
--
-- Returns
--   1   the hold was ours and live: removed (and, if it was the last, "r"
--       published and the intents cut to the window)
--  -1   the hold is gone (its lease expired)
-- The writers that wait were just woken by this release: a live one
-- attempts at once (and so refreshes its intent); one that is frozen or cut
-- off does not, and its intent must not hold new readers back for longer
-- than window_ms (before, it did until its entry expired: about a lease).
local function cut_intents(intents, now_ms, window_ms)
  local until_ms = now_ms + tonumber(window_ms)
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', intents, '(' .. until_ms, '+inf')) do
    redis.call('ZADD', intents, 'XX', until_ms, m)
  end
end
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expiry = redis.call('ZSCORE', KEYS[1], ARGV[2])
redis.call('ZREM', KEYS[1], ARGV[2])
if not expiry or tonumber(expiry) <= now_ms then
  return -1
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now_ms)
if redis.call('ZCARD', KEYS[1]) == 0 then
  cut_intents(KEYS[3], now_ms, ARGV[3])
  -- pcall: a PUBLISH the ACL refuses must not fail the script after its writes.
  redis.pcall('PUBLISH', KEYS[2], 'r')
end
return 1
