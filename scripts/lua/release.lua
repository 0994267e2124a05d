-- release: delete the lock if it is still ours, and wake a waiter.
--
-- KEYS[1]  lock key          P:{N}
-- KEYS[2]  release channel   P:{N}:released (declared as a key so that it
--                            shares the lock's cluster slot)
-- ARGV[1]  token             the owner token of the acquisition being released
--
-- Returns
--   1   the key was ours: deleted, and the release published on KEYS[2]
--   0   the key is held by another token (ours expired and was re-taken)
--  -1   the key is gone (our lease expired and nobody took it since)
--   error WRONGTYPE  the lock key is not a string
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', KEYS[2], '')
  return 1
end
if v then
  return 0
end
return -1
