-- rw_pass: a waiting writer gives up (cancelled, timed out): its intent is
-- withdrawn at once, and the lock's waiters are woken when that can let one
-- of them in: no intent is left (readers held back may enter), or the lock
-- is free (the leaver may have been the writer woken for it).
--
-- KEYS[1]  intents  P:{N}:writers   sorted set: waiting writer -> expiry ms
-- KEYS[2]  channel  P:{N}:rw
-- KEYS[3]  writer   P:{N}
-- KEYS[4]  readers  P:{N}:readers   sorted set: reader token -> expiry ms
-- ARGV[1]  version  the protocol version, "1" (protocol.lua)
-- ARGV[2]  member   "<client id>:<waiter id>" of the leaving writer
--
-- Returns
--   1   the waiters were woken ("i" published)
--   0   nothing to wake for: the lock is held and other writers still wait
redis.call('ZREM', KEYS[1], ARGV[2])
local free = false
if redis.call('EXISTS', KEYS[3]) == 0 then
  local t = redis.call('TIME')
  local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  free = redis.call('ZCOUNT', KEYS[4], '(' .. now_ms, '+inf') == 0
end
if free or redis.call('ZCARD', KEYS[1]) == 0 then
  -- pcall: a PUBLISH the ACL refuses must not fail the script after its writes.
  redis.pcall('PUBLISH', KEYS[2], 'i')
  return 1
end
return 0
