-- acquire: take the lock if it is free (or reserved for this waiter by the
-- release that woke it) and advance its fencing counter; otherwise (for a
-- waiting caller) enter or refresh its place in the queue. While a
-- release's hand-off to a woken waiter is pending, the lock key holds the
-- reservation "m:<member>@<end>" (PX = the reservation; end = its expiry
-- in server ms), so it counts as held for everyone but that waiter.
--
-- KEYS[1]  lock key      P:{N}          string: the owner's token (or a
--                                       reservation), PX = lease
-- KEYS[2]  fence key     P:{N}:fence    string: integer fencing counter
-- KEYS[3]  waiter queue  P:{N}:waiters  sorted set: member -> expiry (server ms)
-- KEYS[4]  readers       P:{N}:readers  an RwLock's read holds (checked only)
-- KEYS[5]  permits       P:{N}:holders  a Semaphore's permits (checked only)
-- ARGV[1]  version       the protocol version, "1" (protocol.lua)
-- ARGV[2]  token         this acquisition's random owner token
-- ARGV[3]  lease_ms      lease in milliseconds (> 0)
-- ARGV[4]  fence_ttl_ms  expiry of the fence key in milliseconds (> 0)
-- ARGV[5]  member        "<client id>:<waiter id>" of a waiting caller, or ""
--                        for a caller that will not wait (nothing is queued)
-- ARGV[6]  grace_ms      how long a queue entry outlives the holder's PTTL
-- ARGV[7]  park_ms       the park of a waiter on a key without expiry
-- ARGV[8]  handoff_ms    the length of a release's hand-off reservation
-- ARGV[9]  kind          the caller's token letter: m (Mutex) or l (an
--                        Election's lock, the same protocol); 'm' if absent
--
-- Returns
--   {1, fence}  the key was set (and the member left the queue, and a
--               hand-off to it ended); fence = max(previous + 1, server
--               TIME in us)
--               The same token already in the key (this call re-sent after
--               its first run's reply was lost) also counts as set: {1,
--               current fence}, and nothing changes.
--   {0, pttl}   someone holds the lock; pttl = the remaining ms of the
--               holder's lease (-1: no expiry). The member, if any, is
--               queued with expiry now + (pttl or park_ms) + grace_ms.
--   {0, park}   the lock is reserved for another waiter (a release just
--               woke it). The member, if any, is queued with expiry (the
--               reservation's end) + lease_ms + grace_ms: behind the
--               waiters that queued while the last holder held. Among the
--               first two in the queue it parks no longer than the
--               reservation (park = handoff_ms), and its score's fraction
--               .5 tells a release that it needs no standby message;
--               third to seventh, park = its rank's standby window,
--               (rank + 1) × 2 × handoff_ms, at most handoff_ms +
--               lease_ms; further back, park = handoff_ms + lease_ms
--               (no .5 for either).
--   error WRONGKIND  the name is in use as another kind (the lock key
--                    holds a token of another letter: a FairMutex, an
--                    RwLock writer, a Mutex beside an Election or the
--                    reverse; or live readers or live permits hold it);
--                    nothing is written. A hand-off reservation is judged
--                    by the token written after it.
--   error WRONGTYPE  the lock key exists but is not a string
--   error WRONGTYPE  the fence key is not a string, or the waiter queue not
--                    a sorted set (no lock key is left either way)
--
-- What each command of the uncontended path buys (5 with this call):
--   SET NX GET   takes a free lock, or reads the holder, in one command
--   EXISTS       readers, queue and permits at once: refuses a Mutex beside
--                live RwLock readers or Semaphore permits, and skips the
--                queue work when nobody waits
--   TIME, SET GET  the fence: max(previous + 1, server time in us), written
--                and the previous value read in one command
-- And of a hand-off's two attempts. The woken waiter's (5): SET NX GET
-- (finds its reservation), SET (its token and lease), TIME and SET GET
-- (the fence). The releaser's, locking again during the reservation (5):
-- SET NX GET (finds the reservation, which says when it ends: no PTTL, no
-- TIME), ZADD (its place), ZRANK (among the first two? then it parks
-- short and is marked, one more ZADD), PTTL of the queue (its expiry must
-- cover the entry; PEXPIRE, with room to spare, when it does not). During
-- a hold instead: SET NX GET, PTTL (the park), TIME, ZADD, PTTL of the
-- queue.
local QUEUE_WRONGTYPE = 'WRONGTYPE waiter queue key holds a value that is not a redbell queue'
local FENCE_WRONGTYPE = 'WRONGTYPE fence key holds a value that is not a redbell fence'
local KIND_ERROR = 'WRONGKIND the lock name is in use as another kind of lock'
-- The error reply for a queue command's failure, or nil: WRONGTYPE
-- (foreign data under the queue key) in redbell's words, any other refusal
-- (NOPERM: the user may not ZADD; OOM) as it came.
local function queue_error(reply)
  if type(reply) ~= 'table' or reply.err == nil then
    return nil
  end
  if string.sub(reply.err, 1, 9) == 'WRONGTYPE' then
    return redis.error_reply(QUEUE_WRONGTYPE)
  end
  return reply
end

local function other_kind(token, mine)
  -- Tokens open with their kind: m (Mutex), q (FairMutex), w (RwLock
  -- writer), r (RwLock reader), l (Election). A token of another kind means
  -- the name is in use as another kind of lock, whose waiters this one
  -- would never wake (tokens of older clients, plain hex, are not judged).
  local tag = string.sub(token, 1, 1)
  return string.find('mqwrl', tag, 1, true) ~= nil and tag ~= mine
end
local kind = ARGV[9] or 'm'
-- Live members of a sorted set of holds (token -> expiry ms): readers,
-- permits.
local function live(key)
  local t = redis.call('TIME')
  return redis.call('ZCOUNT', key, tonumber(t[1]) * 1000, '+inf') > 0
end

-- Advances the fence and returns it, or nil (and undoes the lock) when the
-- fence key holds foreign data.
local function advance_fence()
  local t = redis.call('TIME')
  local fence = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local prev = redis.pcall('SET', KEYS[2], string.format('%d', fence), 'PX', ARGV[4], 'GET')
  if type(prev) == 'table' and prev.err then
    redis.call('DEL', KEYS[1]) -- foreign data under the fence key: undo
    return nil
  end
  prev = tonumber(prev) or 0
  if prev >= fence then
    -- The clock is behind the counter (a step back, or a failover to a
    -- server whose clock lags): keep counting up instead.
    fence = prev + 1
    redis.call('SET', KEYS[2], string.format('%d', fence), 'PX', ARGV[4])
  end
  return fence
end

local member = ARGV[5]
local holder = redis.pcall('SET', KEYS[1], ARGV[2], 'GET', 'NX', 'PX', ARGV[3])
if type(holder) == 'table' then
  if string.sub(holder.err, 1, 9) == 'WRONGTYPE' then
    return redis.error_reply('WRONGTYPE lock key holds a value that is not a redbell token')
  end
  -- Any other refusal (READONLY on a demoted primary, OOM, NOPERM) as it
  -- came, so the client sees what happened (and follows a failover).
  return holder
end
if not holder then
  -- The lock was free and is ours now. Readers, permits or queued waiters
  -- are rare on a free lock: one EXISTS rules all three out.
  -- (A caller of the older four-key layout, KEYS[5] absent, is not
  -- checked for permits.)
  if redis.call('EXISTS', KEYS[4], KEYS[3], KEYS[5] or KEYS[4]) > 0 then
    if live(KEYS[4]) or (KEYS[5] and live(KEYS[5])) then
      redis.call('DEL', KEYS[1])
      return redis.error_reply(KIND_ERROR)
    end
    local err = member ~= '' and queue_error(redis.pcall('ZREM', KEYS[3], member))
    if err then
      redis.call('DEL', KEYS[1]) -- the queue refused: undo
      return err
    end
  end
  local fence = advance_fence()
  if not fence then
    return redis.error_reply(FENCE_WRONGTYPE)
  end
  return {1, fence}
end
local mine = 'm:' .. member .. '@'
if member ~= '' and (string.sub(holder, 1, #mine) == mine or holder == 'm:' .. member) then
  -- Reserved for us by the release that woke us (which also took us out
  -- of the queue). No reader can have joined: a reservation is a Mutex's.
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  local fence = advance_fence()
  if not fence then
    return redis.error_reply(FENCE_WRONGTYPE)
  end
  return {1, fence}
end
local reserved_until = string.match(holder, '^m:.*@(%d+)$')
if not reserved_until and other_kind(holder, kind) then
  -- (A reservation is the plain protocol's, whether a Mutex's or an
  -- Election's: the next attempt judges the token taken after it.)
  return redis.error_reply(KIND_ERROR)
end
if holder == ARGV[2] then
  -- A re-sent attempt (its first run's reply was lost) finds its own token:
  -- that run acquired, so this one reports it again and changes nothing.
  if member ~= '' then
    redis.pcall('ZREM', KEYS[3], member)
  end
  return {1, tonumber(redis.call('GET', KEYS[2])) or 0}
end
-- Reserved for the waiter a release just woke ("m:<member>@<end ms>"). The
-- reservation says when it ends, so neither the lock's PTTL nor TIME is
-- needed: the entry's expiry counts from the reservation's start (its end
-- less handoff_ms: the release, no later than now and at most handoff_ms
-- before), plus the caller's lease (the next holder's is not known yet)
-- and the grace. That is where a waiter queued during the next hold lands
-- too (that holder's start + lease + grace: the holder's PTTL counts down
-- as now goes up), so with equal leases the queue stays in order of the
-- hold or reservation each waiter queued during: behind the waiters that
-- queued during the last hold, ahead of those that queue during the next.
-- (Counting from the reservation's end put this entry behind everyone who
-- queued during the next handoff_ms of holds: a releaser whose attempt
-- came just after the woken waiter took the lock jumped the whole queue,
-- a wait p99 of 7-12 ms at W=8 in the bench against 3 ms.) The entry still
-- outlives the park below by the grace less handoff_ms. How long it parks
-- depends on its place:
--   among the first two  until the reservation ends (if the woken waiter is
--     frozen or dead, the lock is free by then; if it took the lock, the
--     next attempt learns its PTTL), and its score carries the fraction .5:
--     a release sends no standby to a member that parks that short anyway
--   third to seventh  the window of its rank, as if the release had told
--     it: the n-th in line (n = rank + 1) parks n × 2 × handoff_ms (at most
--     handoff_ms + lease_ms). The members ahead of it were told by that
--     release and may all be frozen (a paused host's workers), and the lock
--     is free once the reservation ends; parking a lease would leave it
--     free for that long. No .5: a later release still standbys it
--   further back  for the lease it assumed: releases standby it (no .5)
--     once it is among the next seven in line, and the ones ahead of it park
--     on the holder or the reservation, so a crashed holder is still taken
--     over at its expiry
if reserved_until then
  local park = tonumber(ARGV[8])
  if member ~= '' then
    local expiry = tonumber(reserved_until) - tonumber(ARGV[8]) + tonumber(ARGV[3])
      + tonumber(ARGV[6])
    local err = queue_error(redis.pcall('ZADD', KEYS[3], expiry, member))
    if err then
      return err
    end
    local rank = redis.call('ZRANK', KEYS[3], member)
    if rank <= 1 then
      redis.call('ZADD', KEYS[3], string.format('%d.5', expiry), member)
    elseif rank < 7 then
      -- Among the seven after the woken one (wake_next.lua's STANDBYS):
      -- the window a standby would have given it, n × 2 × handoff_ms for
      -- the n-th (n = rank + 1), as the release that made the reservation
      -- told the members ahead of it; they may all be frozen.
      park = math.min((rank + 1) * 2 * park, park + tonumber(ARGV[3])) -- park = handoff_ms
    else
      park = park + tonumber(ARGV[3])
    end
    -- The queue outlives its entries: this one ends at most ttl from now
    -- (the reservation ends within handoff_ms). Twice that, so that the
    -- next entries rarely need a PEXPIRE.
    local ttl = tonumber(ARGV[3]) + tonumber(ARGV[6]) + tonumber(ARGV[8])
    if redis.call('PTTL', KEYS[3]) < ttl then
      redis.call('PEXPIRE', KEYS[3], 2 * ttl)
    end
  end
  return {0, park}
end
-- Held: park until the holder's lease ends, then attempt again.
local pttl = redis.call('PTTL', KEYS[1])
if member ~= '' then
  local t = redis.call('TIME')
  local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  local ttl = (pttl >= 0 and pttl or tonumber(ARGV[7])) + tonumber(ARGV[6])
  local err = queue_error(redis.pcall('ZADD', KEYS[3], now_ms + ttl, member))
  if err then
    return err
  end
  if redis.call('PTTL', KEYS[3]) < ttl then
    redis.call('PEXPIRE', KEYS[3], 2 * ttl) -- room to spare, as above
  end
end
return {0, pttl}
