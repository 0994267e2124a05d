-- sem_acquire: take a permit of the semaphore if one is free and not owed
-- to a waiter ahead of us (FIFO by arrival at the server); otherwise, for a
-- waiting caller, enter or refresh its place in the queue. Expired holders
-- are reclaimed, and the waiters newly owed their permits are woken.
-- (sem_common.lua is prepended.)
--
-- KEYS[1]  holders       P:{N}:holders       sorted set: token -> expiry (server ms)
-- KEYS[2]  fence key     P:{N}:fence         string: fencing counter
-- KEYS[3]  queue         P:{N}:queue         sorted set: member -> arrival (server us)
-- KEYS[4]  expiry        P:{N}:queue:expiry  sorted set: member -> expiry (server ms)
-- KEYS[5]  count         P:{N}:permits       string: the permit count
-- KEYS[6]  lock key      P:{N}               another kind's token (checked only)
-- KEYS[7]  readers       P:{N}:readers       an RwLock's read holds (checked only)
-- ARGV[1]  version       the protocol version, "1" (protocol.lua)
-- ARGV[2]  token         this acquisition's random permit token
-- ARGV[3]  lease_ms      the permit's lease in milliseconds (> 0)
-- ARGV[4]  fence_ttl_ms  expiry of the fence key (> 0)
-- ARGV[5]  member        "<client id>:<waiter id>" of a waiting caller, or ""
--                        for a caller that will not wait (nothing is queued)
-- ARGV[6]  grace_ms      how long a queue entry outlives the park it is told
-- ARGV[7]  park_ms       the park when no holder has an expiry to wait for
-- ARGV[8]  wake prefix   P:{N}:wake:
-- ARGV[9]  permits       the caller's permit count (> 0)
-- ARGV[10] reserve_ms    how long a woken waiter keeps its place unconfirmed
-- ARGV[11] arrival_us    when the waiter first reached the server (a failed
--                        attempt's now_us, made before its client's turn to
--                        queue it came, acquire.rs "One place per client"),
--                        or "": it queues by that arrival (never later than
--                        now), so a client's waiters keep their FIFO places
--
-- Returns
--   {1, fence}  a permit is ours: the token is in the holders set with
--               expiry now + lease_ms, the member left the queue; fence =
--               max(previous + 1, server TIME in us). The same token already
--               holding a live permit (this call re-sent after its first
--               run's reply was lost) also counts: {1, current fence}, and
--               nothing changes.
--   {0, park, now_us}  no permit for us: all are held, or the free ones
--               are owed to waiters ahead. park = ms until the earliest
--               holder's lease ends (park_ms if none), or, with permits
--               free but owed, until the earliest owed member's entry
--               lapses if sooner (a frozen woken member's, cut to
--               reserve_ms: our next attempt prunes it and takes the
--               permit). A waiting caller is queued (its arrival kept if it
--               was queued already) with expiry now + park + grace_ms (the
--               park before that cap: an entry may outlive its park).
--               now_us: the server time of this call (a later turn to
--               queue passes it as arrival_us).
--   error PERMITS <stored>  the semaphore exists with another permit count
--                           (nothing was written)
--   error WRONGKIND  the name is in use as a Mutex, FairMutex, RwLock
--                    writer or Election (the lock key holds its token, or
--                    a Mutex's hand-off reservation), or RwLock readers
--                    hold it (live read holds); nothing is written. The
--                    lock key is read by the MGET that reads the count;
--                    the readers cost a ZCOUNT, paid for by keep_count
--                    no longer asking EXISTS of the count (the MGET read
--                    it): the uncontended path keeps its length.
--   error WRONGTYPE  a key holds foreign data
local now_us, now_ms = now()
local token, member = ARGV[2], ARGV[5]
local lease = tonumber(ARGV[3])
local read = redis.call('MGET', KEYS[5], KEYS[6] or KEYS[5])
local stored, other = read[1], KEYS[6] and read[2]
-- Tokens open with their kind (m Mutex, q FairMutex, w RwLock writer, l
-- Election; plain hex of older clients is not judged); MGET reads a key
-- of another type as nil.
if (other and other ~= '' and string.find('mqwl', string.sub(other, 1, 1), 1, true))
  or (KEYS[7] and redis.call('ZCOUNT', KEYS[7], '(' .. now_ms, '+inf') > 0) then
  -- Live readers: an RwLock's read holds (token -> expiry ms). Its read
  -- and write acquires refuse live permits in turn, each atomically, so
  -- neither kind can slip in beside the other. (KEYS[7] absent: an older
  -- caller, not checked.)
  return redis.error_reply('WRONGKIND the lock name is in use as another kind of lock')
end
if stored and stored ~= ARGV[9] then
  if not tonumber(stored) then
    return redis.error_reply('WRONGTYPE count key holds a value that is not a permit count')
  end
  return redis.error_reply('PERMITS ' .. stored)
end
local permits = tonumber(ARGV[9])

local function leave_queue()
  if member ~= '' then
    redis.call('ZREM', KEYS[3], member)
    redis.call('ZREM', KEYS[4], member)
  end
end

local mine = redis.call('ZSCORE', KEYS[1], token)
if mine and tonumber(mine) > now_ms then
  leave_queue()
  return {1, tonumber(redis.call('GET', KEYS[2])) or 0}
end

local freed = reclaim(KEYS[1], now_ms)
local free = permits - redis.call('ZCARD', KEYS[1])
freed = freed + prune(KEYS[3], KEYS[4], now_ms, member,
                      math.max(math.min(free, redis.call('ZCARD', KEYS[3])), 0))
-- A waiting caller is queued (by its arrival) before its rank is judged:
-- a sibling whose turn to queue came late sorts ahead of members queued
-- after its first attempt, and may land among the owed ranks. Judged
-- before, it counted as the back of the queue and parked, and nobody woke
-- it (settle wakes only the ranks a freed permit makes owed), while the
-- permit it was owed sat free. Queued first, it takes that permit now, and
-- the members it moved back were owed nothing more than before (ranks at
-- or past `free` were owed nothing). `added`: this call queued it.
local added = member ~= '' and redis.call('ZADD', KEYS[3], 'NX',
  math.min(tonumber(ARGV[11]) or now_us, now_us), member) == 1
local rank = member ~= '' and redis.call('ZRANK', KEYS[3], member)
if not rank then
  rank = redis.call('ZCARD', KEYS[3])
end

if rank < free then
  local prev = redis.pcall('GET', KEYS[2])
  if type(prev) == 'table' then
    if added then
      redis.call('ZREM', KEYS[3], member)
    end
    return redis.error_reply('WRONGTYPE fence key holds a value that is not a redbell fence')
  end
  local fence = math.max((tonumber(prev) or 0) + 1, now_us)
  redis.call('SET', KEYS[2], string.format('%d', fence), 'PX', ARGV[4])
  redis.call('ZADD', KEYS[1], now_ms + lease, token)
  keep_key(KEYS[1], lease + HOLDERS_GRACE_MS)
  keep_count(KEYS[5], permits, lease + HOLDERS_GRACE_MS, stored)
  leave_queue()
  settle(KEYS[1], KEYS[3], KEYS[4], permits, ARGV[8], freed, ARGV[10], now_ms)
  return {1, fence}
end

local park = tonumber(ARGV[7])
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if first[2] then
  park = math.max(tonumber(first[2]) - now_ms, 1)
end
if member ~= '' then
  local ttl = park + tonumber(ARGV[6])
  redis.call('ZADD', KEYS[4], now_ms + ttl, member)
  for _, key in ipairs({KEYS[3], KEYS[4]}) do
    if redis.call('PTTL', key) < ttl then
      redis.call('PEXPIRE', key, ttl)
    end
  end
  keep_count(KEYS[5], permits, ttl, stored)
end
settle(KEYS[1], KEYS[3], KEYS[4], permits, ARGV[8], freed, ARGV[10], now_ms)
if free > 0 then
  -- Free permits owed to the members ahead (ranks 0..free-1, after the
  -- settle above cut the newly owed ones to the reservation): a live one
  -- takes its permit at once, a frozen one's entry lapses and the next
  -- attempt prunes it, which frees the permit for us. Nobody tells us when
  -- it lapses, so park no longer than the earliest owed entry (else until
  -- a holder's lease ends: seconds, for a permit free after 250 ms). On
  -- this losing path only; the uncontended one pays nothing.
  -- (ZMSCORE in slices: unpack's stack is bounded, a count is not.)
  local ahead = redis.call('ZRANGE', KEYS[3], 0, free - 1)
  for i = 1, #ahead, 1000 do
    local j = math.min(i + 999, #ahead)
    for _, e in ipairs(redis.call('ZMSCORE', KEYS[4], unpack(ahead, i, j))) do
      if e then
        park = math.min(park, math.max(tonumber(e) - now_ms + 1, 1))
      end
    end
  end
end
return {0, park, now_us}
