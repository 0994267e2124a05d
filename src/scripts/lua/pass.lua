-- pass: a waiter leaves the queue without the lock (cancelled, timed out,
-- or woken after it was gone) and passes any wake-up on. (wake_next.lua is
-- prepended.)
--
-- KEYS[1]  lock key      P:{N}
-- KEYS[2]  waiter queue  P:{N}:waiters
-- ARGV[1]  version       the protocol version, "1" (protocol.lua)
-- ARGV[2]  member        "<client id>:<waiter id>" of the leaving waiter
-- ARGV[3]  wake prefix   P:{N}:wake:
-- ARGV[4]  handoff_ms    how long the lock is reserved for the woken waiter
--
-- Returns
--   1   the lock is free (or was reserved for the leaver) and the next
--       waiter was woken
--   0   the lock is held or being handed to another waiter (that one's
--       release or attempt moves things on), or nobody else waits
redis.call('ZREM', KEYS[2], ARGV[2])
local holder = redis.call('GET', KEYS[1])
local mine = 'm:' .. ARGV[2] .. '@'
if holder and string.sub(holder, 1, #mine) ~= mine and holder ~= 'm:' .. ARGV[2] then
  return 0
end
local head = redis.call('ZRANGE', KEYS[2], 0, STANDBYS, 'WITHSCORES')
local woke = wake_next(KEYS[1], KEYS[2], ARGV[3], ARGV[4], head)
if woke == 0 and holder then
  redis.call('DEL', KEYS[1]) -- our reservation, and nobody to pass it to
end
return woke
