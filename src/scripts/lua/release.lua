-- release: delete the lock if it is still ours, and wake the head waiter.
-- (wake_next.lua is prepended.)
--
-- KEYS[1]  lock key      P:{N}
-- KEYS[2]  waiter queue  P:{N}:waiters
-- KEYS[3]  hand-off      P:{N}:handoff
-- ARGV[1]  token         the owner token of the acquisition being released
-- ARGV[2]  wake prefix   P:{N}:wake:  (a client's wake channel is prefix .. id)
-- ARGV[3]  handoff_ms    how long the lock is reserved for the woken waiter
--
-- Returns
--   1   the key was ours: deleted, and the head waiter (if any) woken
--   0   the key is held by another token (ours expired and was re-taken)
--  -1   the key is gone (our lease expired and nobody took it since)
--   error WRONGTYPE  the lock key is not a string
local v = redis.call('GET', KEYS[1])
if v ~= ARGV[1] then
  if v then
    return 0
  end
  return -1
end
redis.call('DEL', KEYS[1])
wake_next(KEYS[2], ARGV[2], KEYS[3], ARGV[3])
return 1
