-- fair_acquire: take the fair lock if it is free and nobody is queued ahead,
-- confirm a grant made to us, or queue (FIFO by arrival at the server).
-- (fair_common.lua is prepended.)
--
-- KEYS[1]  lock key      P:{N}              string: owner token, PX = lease
-- KEYS[2]  fence key     P:{N}:fence        string: fencing counter
-- KEYS[3]  queue         P:{N}:fifo         sorted set: member -> arrival us
-- KEYS[4]  expiry        P:{N}:fifo:expiry  sorted set: member -> expiry ms
-- KEYS[5]  granted       P:{N}:handoff      string: the member last granted
-- KEYS[6]  readers       P:{N}:readers      an RwLock's read holds (checked only)
-- ARGV[1]  token         this waiter's owner token
-- ARGV[2]  lease_ms      the lease once acquired (> 0)
-- ARGV[3]  fence_ttl_ms  expiry of the fence key
-- ARGV[4]  member        "<client id>:<waiter id>:<token>", or "" for a
--                        caller that will not wait (try_lock)
-- ARGV[5]  grace_ms      how long a queue entry outlives its park
-- ARGV[6]  park_ms       the park of a waiter on a key without expiry
-- ARGV[7]  wake prefix   P:{N}:wake:
-- ARGV[8]  claim_ms      the lease of a grant until it is confirmed
--
-- Returns
--   {1, fence}  ours: taken (lock free, and the queue empty or we are its
--               head once dead and lapsed heads are dropped) or a grant to
--               us confirmed (lease reset to lease_ms); we left the queue
--   {0, park}   not ours. A waiting caller is queued (its arrival kept if it
--               was queued already) and should park for `park` ms at most:
--               the holder's PTTL for the head and the next in line (so a
--               crashed holder or an unconfirmed grant is noticed when it
--               lapses), lease_ms for the others (they are woken in turn).
--               If the lock was free with others queued ahead, the head was
--               granted it.
--   error WRONGKIND  the name is in use as a Mutex or RwLock; nothing is
--                    written
--   error WRONGTYPE  the lock key is not a string
local function other_kind(token, mine)
  -- Tokens open with their kind: m (Mutex), q (FairMutex), w (RwLock
  -- writer), r (RwLock reader). A token of another kind means the name is
  -- in use as another kind of lock, whose waiters this one would never
  -- wake (tokens of older clients, plain hex, are not judged).
  local tag = string.sub(token, 1, 1)
  return string.find('mqwr', tag, 1, true) ~= nil and tag ~= mine
end
local KIND_ERROR = 'WRONGKIND the lock name is in use as another kind of lock'
local now_us, now_ms = now()
local holder = redis.call('GET', KEYS[1])
if (holder and other_kind(holder, 'q'))
    or redis.call('ZCOUNT', KEYS[6], now_ms, '+inf') > 0 then
  return redis.error_reply(KIND_ERROR)
end
prune(KEYS[3], KEYS[4], now_ms)
local member = ARGV[4]

local function leave_queue()
  if member ~= '' then
    redis.call('ZREM', KEYS[3], member)
    redis.call('ZREM', KEYS[4], member)
    if redis.call('GET', KEYS[5]) == member then
      redis.call('DEL', KEYS[5])
    end
  end
end

if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  leave_queue()
  return {1, tonumber(redis.call('GET', KEYS[2])) or 0}
end
if not holder then
  local moved = grant_next(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[7], ARGV[8],
                           ARGV[3], now_us, member)
  if moved ~= 1 then
    local fence = next_fence(KEYS[2], now_us, ARGV[3])
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
    leave_queue()
    return {1, fence}
  end
end
local pttl = redis.call('PTTL', KEYS[1])
if member == '' then
  return {0, pttl}
end
redis.call('ZADD', KEYS[3], 'NX', now_us, member)
local park = tonumber(ARGV[2])
if redis.call('ZRANK', KEYS[3], member) <= 1 then
  park = pttl
end
if park < 0 then
  park = tonumber(ARGV[6])
end
local ttl = park + tonumber(ARGV[5])
redis.call('ZADD', KEYS[4], now_ms + ttl, member)
for _, key in ipairs({KEYS[3], KEYS[4]}) do
  if redis.call('PTTL', key) < ttl then
    redis.call('PEXPIRE', key, ttl)
  end
end
return {0, park}
