-- break_lock: an operator breaks a lock of any kind whoever holds it, and
-- moves it on as its holder's release would: a Mutex wakes its head waiter,
-- a FairMutex is granted to its head waiter, an RwLock loses its writer and
-- every reader and wakes its waiters. (wake_next.lua and fair_common.lua
-- are prepended.)
--
-- KEYS[1]  lock key     P:{N}              owner token: Mutex, FairMutex, RwLock writer
-- KEYS[2]  waiters      P:{N}:waiters      Mutex queue
-- KEYS[3]  hand-off     P:{N}:handoff      FairMutex: the standby marker (fair_common;
--                                          a Mutex keeps its reservation in the lock key)
-- KEYS[4]  fence key    P:{N}:fence
-- KEYS[5]  fair queue   P:{N}:fifo
-- KEYS[6]  (unused)     P:{N}:fifo:expiry  older clients' FairMutex queue expiries
-- KEYS[7]  readers      P:{N}:readers      RwLock read holds: token -> expiry ms
-- KEYS[8]  channel      P:{N}:rw           the RwLock's release channel
-- ARGV[1]  version       the protocol version, "1" (protocol.lua)
-- ARGV[2]  wake prefix   P:{N}:wake:
-- ARGV[3]  handoff_ms    how long a Mutex is reserved for the woken waiter
-- ARGV[4]  claim_ms      the lease of a FairMutex grant until it is confirmed
-- ARGV[5]  fence_ttl_ms  expiry of the fence key
--
-- The kind is told by the holder's token, which opens with its kind's
-- letter (m Mutex, q FairMutex, w RwLock writer, l Election: broken as a
-- Mutex, whose protocol it runs), or by live read holds.
-- A token of no known kind (older clients, foreign writers) is broken as a
-- Mutex's.
--
-- Returns {kind, removed...}:
--   kind     "mutex", "fair", "rwlock" or "election"; "" when nothing was held
--   removed  the tokens removed: the holder's, or an RwLock's writer and
--            live readers
--   error WRONGTYPE  a key holds foreign data
local now_us, now_ms = now()
local holder = redis.call('GET', KEYS[1])
local readers = redis.call('ZRANGEBYSCORE', KEYS[7], '(' .. now_ms, '+inf')
local tag = holder and string.sub(holder, 1, 1)
if tag == 'w' or #readers > 0 then
  local removed = {'rwlock'}
  if holder then
    removed[#removed + 1] = holder
  end
  for _, r in ipairs(readers) do
    removed[#removed + 1] = r
  end
  redis.call('DEL', KEYS[1], KEYS[7])
  redis.call('PUBLISH', KEYS[8], 'w')
  return removed
end
if not holder then
  return {''}
end
redis.call('DEL', KEYS[1])
if tag == 'q' then
  if grant_next(KEYS[1], KEYS[4], KEYS[5], KEYS[3], ARGV[2], ARGV[4], ARGV[5], now_us, '',
                false) ~= 1 then
    redis.call('DEL', KEYS[1]) -- a grant that met no receiver
  end
  return {'fair', holder}
end
if string.sub(holder, 1, 2) == 'm:' then
  return {''} -- only reserved for a woken waiter: nothing is held
end
wake_next(KEYS[1], KEYS[2], ARGV[2], ARGV[3], redis.call('ZRANGE', KEYS[2], 0, STANDBYS, 'WITHSCORES'))
return {tag == 'l' and 'election' or 'mutex', holder}
