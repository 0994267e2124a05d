-- release: delete the lock if it is still ours, and wake the head waiter.
-- (wake_next.lua is prepended.)
--
-- KEYS[1]  lock key      P:{N}
-- KEYS[2]  waiter queue  P:{N}:waiters
-- ARGV[1]  version       the protocol version, "1" (protocol.lua)
-- ARGV[2]  token         the owner token of the acquisition being released
-- ARGV[3]  wake prefix   P:{N}:wake:  (a client's wake channel is prefix .. id)
-- ARGV[4]  handoff_ms    how long the lock is reserved for the woken waiter
--
-- Returns
--   1   the key was ours: deleted (or turned into the woken waiter's
--       reservation), and the head waiter (if any) woken
--   0   the key is held by another token (ours expired and was re-taken)
--  -1   the key is gone (our lease expired and nobody took it since)
--   error WRONGTYPE  the lock key is not a string, or the queue not a
--                    sorted set
--
-- Waking the head (wake_next.lua) adds TIME (to prune expired members and
-- to date the reservation), PUBLISH (the wake-up), SET (the reservation),
-- ZREM (the woken member leaves the queue) and a standby PUBLISH for each
-- of the next seven (STANDBYS) that can use one (with a ZADD that marks it as told).
-- With nobody waiting it runs GET (is it ours?), ZRANGE (the queue's head:
-- empty, so nothing to wake and nothing published) and DEL. The queue read
-- is the one command that tells an empty queue, and it is atomic with the
-- DEL: an attempt that queued before it is seen, one after it finds the
-- lock free.
local v = redis.call('GET', KEYS[1])
if v ~= ARGV[2] then
  if v then
    return 0
  end
  return -1
end
local head = redis.call('ZRANGE', KEYS[2], 0, STANDBYS, 'WITHSCORES')
if wake_next(KEYS[1], KEYS[2], ARGV[3], ARGV[4], head) == 0 then
  redis.call('DEL', KEYS[1])
end
return 1
