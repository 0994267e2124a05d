-- fair_release: delete the fair lock if it is still ours, or grant it to
-- the head waiter directly: the lock holds the head's token on a claim
-- until the head's own attempt sets its lease, before its guard is
-- returned (fair_common). (fair_common.lua is prepended.)
--
-- KEYS[1]  lock key   P:{N}
-- KEYS[2]  fence key  P:{N}:fence
-- KEYS[3]  queue      P:{N}:fifo
-- KEYS[4]  hand-off   P:{N}:handoff
-- ARGV[1]  version       the protocol version, "1" (protocol.lua)
-- ARGV[2]  token         the owner token being released
-- ARGV[3]  wake prefix   P:{N}:wake:
-- ARGV[4]  claim_ms      the lease of a grant until its waiter confirms it
-- ARGV[5]  fence_ttl_ms  expiry of the fence key
--
-- The commands: GET (still ours?) and ZPOPMIN (the head, out of the queue);
-- nobody waits: DEL. Someone waits: TIME, GET of the hand-off (standbys
-- needed?), GET and SET of the fence, SET of the lock to the head's token
-- (overwriting ours) and its PUBLISH.
--
-- Returns
--   1   the key was ours: deleted, or granted to the head waiter
--   0   the key is held by another token
--  -1   the key is gone
--   error WRONGTYPE  the lock key is not a string
local v = redis.call('GET', KEYS[1])
if v ~= ARGV[2] then
  if v then
    return 0
  end
  return -1
end
if grant_next(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[3], ARGV[4], ARGV[5], nil, '',
              false) ~= 1 then
  redis.call('DEL', KEYS[1])
end
return 1
