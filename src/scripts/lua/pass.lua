-- pass: a waiter leaves the queue without the lock (cancelled, timed out,
-- or woken after it was gone) and passes any wake-up on. (wake_next.lua is
-- prepended.)
--
-- KEYS[1]  lock key      P:{N}
-- KEYS[2]  waiter queue  P:{N}:waiters
-- KEYS[3]  hand-off      P:{N}:handoff
-- ARGV[1]  member        "<client id>:<waiter id>" of the leaving waiter
-- ARGV[2]  wake prefix   P:{N}:wake:
-- ARGV[3]  handoff_ms    how long the lock is reserved for the woken waiter
--
-- Returns
--   1   the lock is free and the next waiter was woken
--   0   the lock is held or being handed to another waiter (that one's
--       release or attempt moves things on), or nobody else waits
redis.call('ZREM', KEYS[2], ARGV[1])
local handoff = redis.call('GET', KEYS[3])
if handoff == ARGV[1] then
  redis.call('DEL', KEYS[3])
elseif handoff then
  return 0
end
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
return wake_next(KEYS[2], ARGV[2], KEYS[3], ARGV[3])
