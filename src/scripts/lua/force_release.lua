-- force_release: an operator breaks a lock whoever holds it, and the head
-- waiter is woken so the queue moves on. (wake_next.lua is prepended.)
--
-- KEYS[1]  lock key      P:{N}
-- KEYS[2]  waiter queue  P:{N}:waiters
-- ARGV[1]  wake prefix   P:{N}:wake:
-- ARGV[2]  handoff_ms    how long the lock is reserved for the woken waiter
--
-- Returns
--   the removed owner token, or "" when the lock was free (or only
--   reserved for a woken waiter)
--   error WRONGTYPE  the lock key is not a string
local holder = redis.call('GET', KEYS[1])
if not holder then
  return ''
end
local head = redis.call('ZRANGE', KEYS[2], 0, 2, 'WITHSCORES')
if wake_next(KEYS[1], KEYS[2], ARGV[1], ARGV[2], head) == 0 then
  redis.call('DEL', KEYS[1])
end
if string.sub(holder, 1, 2) == 'm:' then
  return ''
end
return holder
