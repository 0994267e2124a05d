-- fair_pass: a fair waiter leaves the queue without the lock (cancelled,
-- timed out, or its grant reached it too late to use); a grant made to it
-- moves on to the next waiter at once. (fair_common.lua is prepended.)
--
-- KEYS[1]  lock key   P:{N}
-- KEYS[2]  fence key  P:{N}:fence
-- KEYS[3]  queue      P:{N}:fifo
-- KEYS[4]  hand-off   P:{N}:handoff
-- ARGV[1]  version       the protocol version, "1" (protocol.lua)
-- ARGV[2]  member        "<client id>:<waiter id>:<token>" of the leaving waiter
-- ARGV[3]  wake prefix   P:{N}:wake:
-- ARGV[4]  claim_ms      the lease of a grant until its waiter confirms it
-- ARGV[5]  fence_ttl_ms  expiry of the fence key
--
-- Only a waiter that never returned a guard passes (a waiter that did has
-- marked its registration acquired), so a lock holding the leaver's token
-- is a grant it will never use.
--
-- Returns
--   1   the lock was free (or granted to the leaver) and the next waiter
--       was granted it
--   0   the leaver was neither queued nor granted, the lock is held by
--       someone else, or nobody else waits
local removed = redis.call('ZREM', KEYS[3], ARGV[2])
if removed == 1 and redis.call('ZCARD', KEYS[3]) == 1 then
  redis.call('ZREM', KEYS[3], LONG) -- nobody else is queued: no long park either
end
local _, _, token = split(ARGV[2])
local holder = redis.call('GET', KEYS[1])
if not (holder and holder == token) and (holder or removed == 0) then
  return 0
end
if grant_next(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[3], ARGV[4], ARGV[5], nil, '',
              false) == 1 then
  return 1
end
redis.call('DEL', KEYS[1])
return 0
