-- fair_release: delete the fair lock if it is still ours and grant it to
-- the head waiter directly. (fair_common.lua is prepended.)
--
-- KEYS[1]  lock key   P:{N}
-- KEYS[2]  fence key  P:{N}:fence
-- KEYS[3]  queue      P:{N}:fifo
-- KEYS[4]  expiry     P:{N}:fifo:expiry
-- KEYS[5]  granted    P:{N}:handoff
-- ARGV[1]  token         the owner token being released
-- ARGV[2]  wake prefix   P:{N}:wake:
-- ARGV[3]  claim_ms      the lease of a grant until it is confirmed
-- ARGV[4]  fence_ttl_ms  expiry of the fence key
--
-- Returns
--   1   the key was ours: deleted, and the head waiter (if any) granted it
--   0   the key is held by another token
--  -1   the key is gone
--   error WRONGTYPE  the lock key is not a string
local v = redis.call('GET', KEYS[1])
if v ~= ARGV[1] then
  if v then
    return 0
  end
  return -1
end
redis.call('DEL', KEYS[1])
local now_us, now_ms = now()
prune(KEYS[3], KEYS[4], now_ms)
grant_next(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[2], ARGV[3], ARGV[4], now_us, '')
return 1
