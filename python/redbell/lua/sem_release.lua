-- sem_release: give a permit back if it is still ours, reclaim expired
-- holders, and wake as many waiters as permits came free.
-- (sem_common.lua is prepended.)
--
-- KEYS[1]  holders      P:{N}:holders
-- KEYS[2]  queue        P:{N}:queue
-- KEYS[3]  expiry       P:{N}:queue:expiry
-- KEYS[4]  count        P:{N}:permits
-- ARGV[1]  version      the protocol version, "1" (protocol.lua)
-- ARGV[2]  token        the permit token being released
-- ARGV[3]  wake prefix  P:{N}:wake:
-- ARGV[4]  permits      the caller's permit count (used when none is stored)
-- ARGV[5]  reserve_ms   how long a woken waiter keeps its place unconfirmed
--
-- Returns
--   1   the permit was ours and live: removed, and the waiters now owed a
--       permit woken
--  -1   the permit is gone (its lease expired: reclaimed now or before, and
--       maybe held by someone else since); nobody else's permit is touched
--   error WRONGTYPE  a key holds foreign data
local now_us, now_ms = now()
local score = redis.call('ZSCORE', KEYS[1], ARGV[2])
local freed = 0
if score then
  redis.call('ZREM', KEYS[1], ARGV[2])
  freed = 1
end
freed = freed + reclaim(KEYS[1], now_ms)
if freed > 0 then
  local permits = stored_permits(KEYS[4], ARGV[4])
  freed = freed + prune(KEYS[2], KEYS[3], now_ms, '', owed(KEYS[1], KEYS[2], permits))
  settle(KEYS[1], KEYS[2], KEYS[3], permits, ARGV[3], freed, ARGV[5], now_ms)
end
if score and tonumber(score) > now_ms then
  return 1
end
return -1
