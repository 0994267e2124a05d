-- fair_pass: a fair waiter leaves the queue without the lock (cancelled,
-- timed out, or its grant reached it after it was gone); a grant made to it
-- moves on to the next waiter at once. (fair_common.lua is prepended.)
--
-- KEYS[1]  lock key   P:{N}
-- KEYS[2]  fence key  P:{N}:fence
-- KEYS[3]  queue      P:{N}:fifo
-- KEYS[4]  expiry     P:{N}:fifo:expiry
-- KEYS[5]  granted    P:{N}:handoff
-- ARGV[1]  member        "<client id>:<waiter id>:<token>" of the leaving waiter
-- ARGV[2]  wake prefix   P:{N}:wake:
-- ARGV[3]  claim_ms      the lease of a grant until it is confirmed
-- ARGV[4]  fence_ttl_ms  expiry of the fence key
--
-- Returns
--   1   the lock was free (or granted to the leaver) and the next waiter
--       was granted it
--   0   the leaver had left the queue already (e.g. it confirmed its grant:
--       the lock is then its own and must not be touched), the lock is
--       held by someone else, or nobody else waits
if redis.call('ZREM', KEYS[3], ARGV[1]) == 0 then
  return 0
end
redis.call('ZREM', KEYS[4], ARGV[1])
local _, _, token = split(ARGV[1])
local holder = redis.call('GET', KEYS[1])
if holder and holder == token then
  redis.call('DEL', KEYS[1]) -- an unconfirmed grant to the leaver
elseif holder then
  return 0
end
if redis.call('GET', KEYS[5]) == ARGV[1] then
  redis.call('DEL', KEYS[5])
end
local now_us, now_ms = now()
prune(KEYS[3], KEYS[4], now_ms)
return grant_next(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[2], ARGV[3], ARGV[4],
                  now_us, '')
