-- rw_read_release: drop one reader's hold; the last reader out wakes the
-- lock's waiters (a waiting writer).
--
-- KEYS[1]  readers  P:{N}:readers   sorted set: reader token -> expiry ms
-- KEYS[2]  channel  P:{N}:rw        the read-write lock's release channel
-- ARGV[1]  token    the reader's owner token
--
-- Returns
--   1   the hold was ours and live: removed (and "r" published if it was
--       the last)
--  -1   the hold is gone (its lease expired)
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expiry = redis.call('ZSCORE', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[1], ARGV[1])
if not expiry or tonumber(expiry) <= now_ms then
  return -1
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now_ms)
if redis.call('ZCARD', KEYS[1]) == 0 then
  -- pcall: a PUBLISH the ACL refuses must not fail the script after its writes.
  redis.pcall('PUBLISH', KEYS[2], 'r')
end
return 1
