-- extend: reset the lease of a lock we still own.
--
-- KEYS[1]  lock key   P:{N}
-- ARGV[1]  token      the owner token of our acquisition
-- ARGV[2]  lease_ms   the new lease in milliseconds, counted from now (> 0)
--
-- Returns
--   1   the key was ours; its expiry is now lease_ms from now
--   0   the key is held by another token
--  -1   the key is gone (the lease expired)
--   error WRONGTYPE  the lock key is not a string
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if v then
  return 0
end
return -1
