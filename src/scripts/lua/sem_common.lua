-- sem_common: shared code, prepended to the sem_* scripts that write
-- (acquire, release, pass, extend; not run alone).
--
-- A semaphore's state, every key under the hash tag {N}:
--   holders  P:{N}:holders       sorted set: permit token -> lease expiry (server ms)
--   queue    P:{N}:queue         sorted set: member -> arrival (server us): FIFO order
--   expiry   P:{N}:queue:expiry  sorted set: member -> entry expiry (server ms)
--   count    P:{N}:permits       string: the permit count, kept while anything
--                                above lives (it expires with the rest)
-- Members are "<client id>:<waiter id>"; a member's client listens on the
-- wake channel prefix .. client id, and the message is the waiter id.
--
-- The FIFO rule. With free = permits - live holders, the first `free`
-- members of the queue are owed a permit (owed = min(free, queue length)).
-- A caller at rank r takes one iff r < free; a caller that is not queued
-- counts as the back of the queue (r = queue length), so a newcomer never
-- takes a permit owed to a waiter.
--
-- now() -> now_us, now_ms from the server clock.
-- owed(holders, queue, permits) -> min(free, queue length), at least 0.
-- reclaim(holders, now_ms) -> how many expired holders were removed.
-- prune(queue, expiry, now_ms, keep, owed) drops expired members other
--   than `keep` (a caller that attempts is alive); returns how many of them
--   were owed (their permit is now owed to someone else).
-- settle(holders, queue, expiry, permits, prefix, freed, reserve_ms, now_ms)
--   wakes the members newly owed a permit after `freed` permits came free
--   (released, reclaimed, or owed to a member that left): the ranks
--   [owed - freed, owed). A member whose client receives nothing (PUBLISH
--   counted 0 receivers: it is gone) is dropped and the next one tried. A
--   woken member's expiry is cut to reserve_ms from now (its attempt, if it
--   is alive, refreshes it), and the next seven in line after the last
--   woken get a standby "<waiter id>::s<2 * reserve_ms>": they park no
--   longer than that, then attempt, and prune a frozen woken member whose
--   socket stays open (the queue is in arrival order: an attempt that
--   finds no permit keeps its place). A client queues one waiter per
--   semaphore at a time (acquire.rs, "One place per client"), so those
--   are other clients than the woken one's, whatever its number of
--   waiting tasks: a live waiter of another client gets a free permit
--   within the window (500 ms); a caller that finds a permit free but
--   owed parks no longer than the owed entry (sem_acquire.lua), so a
--   newcomer, which got no standby, waits a reservation at most, and a
--   standby behind k frozen members a window and about a reservation per
--   extra frozen member (1 s behind three). Nothing is published when nobody waits. Returns
--   the number woken.
local function now()
  local t = redis.call('TIME')
  local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  return us, math.floor(us / 1000)
end

local function owed(holders, queue, permits)
  local free = permits - redis.call('ZCARD', holders)
  return math.max(math.min(free, redis.call('ZCARD', queue)), 0)
end

local function reclaim(holders, now_ms)
  return redis.call('ZREMRANGEBYSCORE', holders, '-inf', now_ms)
end

local function prune(queue, expiry, now_ms, keep, owed_now)
  local was_owed = 0
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', expiry, '-inf', now_ms)) do
    if m ~= keep then
      local rank = redis.call('ZRANK', queue, m)
      if rank and rank < owed_now then
        was_owed = was_owed + 1
      end
      redis.call('ZREM', queue, m)
      redis.call('ZREM', expiry, m)
    end
  end
  return was_owed
end

local function settle(holders, queue, expiry, permits, prefix, freed, reserve_ms, now_ms)
  if freed <= 0 then
    return 0
  end
  local reserve = tonumber(reserve_ms)
  local limit = owed(holders, queue, permits)
  local rank = math.max(limit - freed, 0)
  local woken = 0
  while rank < limit do
    local m = redis.call('ZRANGE', queue, rank, rank)[1]
    if not m then
      break
    end
    local sep = string.find(m, ':', 1, true)
    local received = 0
    if sep then
      -- pcall: a PUBLISH the ACL refuses must not fail the script after its
      -- writes; the waiters then fall back to their parks' own bounds.
      received = redis.pcall('PUBLISH', prefix .. string.sub(m, 1, sep - 1),
                             string.sub(m, sep + 1))
      if type(received) == 'table' then
        return woken
      end
    end
    if received > 0 then
      redis.call('ZADD', expiry, 'XX', now_ms + reserve, m)
      rank = rank + 1
      woken = woken + 1
    else
      redis.call('ZREM', queue, m)
      redis.call('ZREM', expiry, m)
      limit = owed(holders, queue, permits)
    end
  end
  if woken > 0 then
    -- The next seven stand by: up to seven frozen clients in a row behind
    -- the woken cost the others a reservation window, not a lease.
    for _, m in ipairs(redis.call('ZRANGE', queue, rank, rank + 6)) do
      local s = string.find(m, ':', 1, true)
      if s then
        redis.pcall('PUBLISH', prefix .. string.sub(m, 1, s - 1),
                    string.sub(m, s + 1) .. '::s' .. (2 * reserve))
      end
    end
  end
  return woken
end

-- The stored permit count, or `fallback` when none is stored.
local function stored_permits(count, fallback)
  return tonumber(redis.call('GET', count)) or tonumber(fallback)
end

-- How long the holders set outlives the latest lease written into it. An
-- expired permit must be reclaimed by a script, which wakes whoever the
-- permit is owed to; were the set to expire with its last lease, the next
-- attempt would find no holder to reclaim and wake nobody, leaving the
-- permit owed to a queue head that is gone (a killed waiter, or after a
-- failover a wait that ended on the old primary) until its entry expires.
local HOLDERS_GRACE_MS = 2000

-- Makes `key` (which exists: we just wrote it) live at least ttl_ms more.
local function keep_key(key, ttl_ms)
  if redis.call('PTTL', key) < ttl_ms then
    redis.call('PEXPIRE', key, ttl_ms)
  end
end

-- Keeps the count key alive at least ttl_ms more (set to `permits` if it is
-- gone), so it never expires before the holders or the queue. `stored`: the
-- count key's value as this script read it (nil: none), so that no EXISTS
-- is spent on it (NX: a value MGET read as nil may be foreign data, left
-- alone). The RwLock's acquires rely on this: a live permit means a count
-- key, which they read with the fence.
local function keep_count(count, permits, ttl_ms, stored)
  if not stored then
    redis.call('SET', count, permits, 'PX', ttl_ms, 'NX')
  else
    keep_key(count, ttl_ms)
  end
end
