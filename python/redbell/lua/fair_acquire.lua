-- fair_acquire: take the fair lock if it is free and nobody is queued ahead,
-- confirm a grant made to us, or queue (FIFO by arrival at the server).
-- (fair_common.lua is prepended.)
--
-- KEYS[1]  lock key      P:{N}              string: owner token, PX = lease
-- KEYS[2]  fence key     P:{N}:fence        string: fencing counter
-- KEYS[3]  queue         P:{N}:fifo         sorted set: member -> arrival us
-- KEYS[4]  hand-off      P:{N}:handoff      string: the standby marker (fair_common)
-- KEYS[5]  readers       P:{N}:readers      an RwLock's read holds (checked only)
-- KEYS[6]  permits       P:{N}:holders      a Semaphore's permits (checked only)
-- ARGV[1]  version       the protocol version, "1" (protocol.lua)
-- ARGV[2]  token         this waiter's owner token
-- ARGV[3]  lease_ms      the lease once acquired (> 0)
-- ARGV[4]  fence_ttl_ms  expiry of the fence key
-- ARGV[5]  member        "<client id>:<waiter id>:<token>", or "" for a
--                        caller that will not wait (try_lock)
-- ARGV[6]  grace_ms      how long the queue outlives its members' parks
-- ARGV[7]  park_ms       the park of a waiter on a key without expiry
-- ARGV[8]  wake prefix   P:{N}:wake:
-- ARGV[9]  claim_ms      the lease of a grant until its waiter confirms it
-- ARGV[10] arrival_us    when the waiter first reached the server (a failed
--                        attempt's now_us, made before its client's turn to
--                        queue it came, acquire.rs "One place per client"),
--                        or "": it queues by that arrival (never later than
--                        now), so a client's waiters keep their FIFO places
--
-- A queuing attempt on a held lock runs GET and PTTL of the lock, TIME,
-- ZADD NX (a waiter keeps its arrival), and PTTL of the queue (a PEXPIRE
-- of it every grace period or so); only a park longer than a claim also
-- marks the queue (LONG, so that grants send standbys) and reads the
-- standby marker.
--
-- Returns
--   {1, fence}         ours: taken (lock free, and the queue empty or we
--                      are its head once dead or frozen heads are dropped) or a grant
--                      to us confirmed (its claim becomes our lease_ms:
--                      the grantee returns its guard only after this, so
--                      it never holds less than a lease); we left the queue
--   {0, park, now_us}  not ours. A waiting caller is queued (its arrival
--                      kept if it was queued already) and should park for
--                      `park` ms at most: the holder's PTTL, so that a
--                      crashed holder or an unused grant is noticed when it
--                      lapses. If the lock was free with others queued
--                      ahead, the head was granted it. now_us is the server
--                      time of this call (not read by this client, which
--                      confirms a grant by attempting)
--   error WRONGKIND  the name is in use as a Mutex, Election, RwLock or
--                    Semaphore (a token of another letter, live readers or
--                    live permits); nothing is written. On a free lock one
--                    EXISTS of the readers and permits rules both out.
--   error WRONGTYPE  the lock key is not a string
local function other_kind(token, mine)
  -- Tokens open with their kind: m (Mutex), q (FairMutex), w (RwLock
  -- writer), r (RwLock reader), l (Election). A token of another kind
  -- means the name is in use as another kind of lock, whose waiters this
  -- one would never wake (tokens of older clients, plain hex, are not
  -- judged).
  local tag = string.sub(token, 1, 1)
  return string.find('mqwrl', tag, 1, true) ~= nil and tag ~= mine
end
local KIND_ERROR = 'WRONGKIND the lock name is in use as another kind of lock'
local holder = redis.call('GET', KEYS[1])
if holder and other_kind(holder, 'q') then
  return redis.error_reply(KIND_ERROR)
end
local member = ARGV[5]
if holder == ARGV[2] then
  -- A grant to us (its message lost or not yet read), or a re-sent attempt.
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  if member ~= '' then
    redis.call('ZREM', KEYS[3], member)
  end
  return {1, tonumber(redis.call('GET', KEYS[2])) or 0}
end
local now_us, now_ms = now()
if not holder then
  -- (KEYS[6] absent: a caller of the older five-key layout, whose
  -- permits are not checked.)
  if redis.call('EXISTS', KEYS[5], KEYS[6] or KEYS[5]) > 0
      and (redis.call('ZCOUNT', KEYS[5], now_ms, '+inf') > 0
           or (KEYS[6] and redis.call('ZCOUNT', KEYS[6], now_ms, '+inf') > 0)) then
    return redis.error_reply(KIND_ERROR)
  end
  local moved = grant_next(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[8], ARGV[9], ARGV[4],
                           now_us, member, true)
  if moved ~= 1 then
    -- We are the head (popped: out of the queue), or nobody live waits.
    local fence = next_fence(KEYS[2], now_us, ARGV[4])
    redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
    return {1, fence}
  end
end
local pttl = redis.call('PTTL', KEYS[1])
if member == '' then
  return {0, pttl, now_us}
end
redis.call('ZADD', KEYS[3], 'NX', math.min(tonumber(ARGV[10]) or now_us, now_us), member)
local park = pttl
if park < 0 then
  park = tonumber(ARGV[7])
end
local grace = tonumber(ARGV[6])
if park > tonumber(ARGV[9]) then
  -- A long park: grants to waiters that arrived no later than now send
  -- standbys (LONG, see fair_common). An attempt by the waiter last told to
  -- stand by shows it alive: it is no longer marked.
  local long = tonumber(redis.call('ZSCORE', KEYS[3], LONG))
  if not long or -long < now_us then
    redis.call('ZADD', KEYS[3], -now_us, LONG)
  end
  local _, marked = read_marker(KEYS[4])
  if marked == member then
    redis.call('DEL', KEYS[4])
  end
end
if redis.call('PTTL', KEYS[3]) < park + grace then
  redis.call('PEXPIRE', KEYS[3], park + 2 * grace)
end
return {0, park, now_us}
