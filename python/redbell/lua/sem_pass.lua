-- sem_pass: a waiter leaves the semaphore's queue without a permit
-- (cancelled, timed out, or woken after it was gone); if a permit was owed
-- to it, the next waiter in line is woken instead. (sem_common.lua is
-- prepended.)
--
-- KEYS[1]  holders      P:{N}:holders
-- KEYS[2]  queue        P:{N}:queue
-- KEYS[3]  expiry       P:{N}:queue:expiry
-- KEYS[4]  count        P:{N}:permits
-- ARGV[1]  version      the protocol version, "1" (protocol.lua)
-- ARGV[2]  member       "<client id>:<waiter id>" of the leaving waiter
-- ARGV[3]  wake prefix  P:{N}:wake:
-- ARGV[4]  permits      the caller's permit count (used when none is stored)
-- ARGV[5]  reserve_ms   how long a woken waiter keeps its place unconfirmed
--
-- Returns
--   1   another waiter was woken
--   0   nothing to pass on: the leaver had left the queue already (it took
--       its permit, or this call is a repeat), or no permit was owed to it
local now_us, now_ms = now()
local rank = redis.call('ZRANK', KEYS[2], ARGV[2])
if not rank then
  return 0
end
local permits = stored_permits(KEYS[4], ARGV[4])
local freed = reclaim(KEYS[1], now_ms)
if rank < owed(KEYS[1], KEYS[2], permits) then
  freed = freed + 1
end
redis.call('ZREM', KEYS[2], ARGV[2])
redis.call('ZREM', KEYS[3], ARGV[2])
freed = freed + prune(KEYS[2], KEYS[3], now_ms, '', owed(KEYS[1], KEYS[2], permits))
if settle(KEYS[1], KEYS[2], KEYS[3], permits, ARGV[3], freed, ARGV[5], now_ms) > 0 then
  return 1
end
return 0
