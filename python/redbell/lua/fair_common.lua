-- fair_common: shared code, prepended to the fair_* scripts (not run alone).
--
-- The fair lock's queue is one sorted set, P:{N}:fifo, of members
-- "<client id>:<waiter id>:<token>" scored by arrival (server time in us):
-- FIFO order. A member leaves it when it takes the lock, when it is granted
-- the lock (popped by the grant), when it gives up (pass), or when a grant
-- to it reaches no receiver (its client is gone). The set expires a grace
-- period after the longest park of its members, should they all vanish.
--
-- Long parks. A waiter whose attempt found a long PTTL (more than a claim)
-- may stay parked past the claim of a grant to the waiter ahead, so such
-- grants must also tell the next seven in line to stand by. The queue then
-- holds one more member, LONG = "~", scored by minus the latest such
-- waiter's arrival: it sorts first, so the grant's ZPOPMIN meets it before
-- the head and learns the arrival; with no long park about (the usual
-- case when holds are short) the grant pays nothing for this. It is put
-- back while the waiters granted arrived no later, and dropped once the
-- queue is past it. Counts of waiters skip it (scores below 0).
--
-- P:{N}:handoff is "<deadline>:<member>": the waiter first in line after
-- the last grant that sent standbys, which should have attempted by
-- `deadline` (server ms). An attempt that finds the lock free and that
-- member still at the head after the deadline drops it (frozen); an
-- attempt of that member with a long park clears it.
--
-- now() -> now_us, now_ms from the server clock.
-- next_fence(fence, now_us, ttl_ms) advances the fencing counter to
--   max(previous + 1, now_us) and returns it.
-- read_marker(key) -> deadline, member (0, '' when absent).
-- grant_next(lock, fence, queue, handoff, prefix, claim_ms, fence_ttl_ms,
--            now_us, caller, drop_marked)
--   moves the queue on while the lock is free: pops the head. Returns 2 if
--   the head is `caller` (it left the queue; the caller takes the lock
--   itself), 0 if nobody waits (the lock may then hold a token that met no
--   receiver: the caller deletes or overwrites it). Otherwise it makes the
--   lock the head waiter's (its token, a fresh fence, a claim lease of
--   claim_ms) and publishes "<waiter id>:<token>:g<fence>:<claim end us>"
--   on its client's channel prefix .. client id, and returns 1. The claim
--   is not the grantee's lease: the grantee's own attempt (fair_acquire,
--   which finds its token) sets that before its guard is returned, so a
--   grant never leaves anyone holding less than its lease, and a grantee
--   that never attempts (frozen) holds the queue for the claim only (see
--   src/fair.rs). The grant is
--   preceded by a probe, "<waiter id>:?", that the waiter ignores: a head
--   whose client has no subscriber on this server (the probe's PUBLISH
--   counted 0 receivers: it is gone, or its subscription is on a replica)
--   is dropped without a grant and the next one tried; with drop_marked (the lock was found free, not
--   released), so is the head the marker names once its deadline passed.
--   When the granted head arrived no later than LONG's arrival, the next
--   seven in line get a standby message "<waiter id>:<token>:s<window>":
--   park no longer than `window` ms (the claim plus STANDBY_SLACK_MS for
--   the first, plus three times that for the others), then attempt; a
--   frozen head, or up to seven in a row (a paused host's workers), delay
--   the first live waiter by about a claim per two frozen, not a lease (an
--   attempt drops the standby the marker names and grants the next); a
--   client queues one waiter per lock at a time (acquire.rs, "One place
--   per client"), so they are other clients than the granted one's,
--   whatever its number of waiting tasks. The queue is in arrival order,
--   so a standby's attempt that finds the lock taken keeps its place. A
--   PUBLISH the server refuses (its ACL denies the
--   channel; run under redis.pcall, so the caller's writes stand) takes
--   the grant back, puts the head back and returns 0: the waiters attempt
--   at the end of their bounded parks.
local STANDBY_SLACK_MS = 100
local LONG = '~'
local function now()
  local t = redis.call('TIME')
  local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  return us, math.floor(us / 1000)
end

local function next_fence(fence, now_us, ttl_ms)
  -- One command in the usual case: write the clock and read what it
  -- replaced; only a counter at or past the clock (a step back, a failover
  -- to a lagging server) needs a second write.
  local prev = tonumber(redis.call('SET', fence, string.format('%d', now_us), 'PX', ttl_ms, 'GET'))
  if prev and prev >= now_us then
    redis.call('SET', fence, string.format('%d', prev + 1), 'PX', ttl_ms)
    return prev + 1
  end
  return now_us
end

local function split(member)
  local cid, rest = string.match(member, '^([^:]+):(.*)$')
  local token = rest and string.match(rest, '^[^:]*:(.*)$')
  return cid, rest, token
end

-- The head of the queue, taken out: ZPOPMIN, or under an ACL rule that
-- lacks it (the rule of earlier releases) ZRANGE and ZREM.
local function pop(queue)
  local popped = redis.pcall('ZPOPMIN', queue)
  if popped.err then
    popped = redis.call('ZRANGE', queue, 0, 0, 'WITHSCORES')
    if popped[1] then
      redis.call('ZREM', queue, popped[1])
    end
  end
  return popped
end

local function read_marker(key)
  local deadline, member = string.match(redis.call('GET', key) or '', '^(%d+):(.*)$')
  return tonumber(deadline) or 0, member or ''
end

local function grant_next(lock, fence, queue, handoff, prefix, claim_ms, fence_ttl_ms,
                          now_us, caller, drop_marked)
  local claim = tonumber(claim_ms)
  local long, arrival, deadline, marked
  -- LONG goes back while waiters that arrived no later may be queued.
  local function keep_long()
    if long and arrival and arrival <= long and redis.call('ZCARD', queue) > 0 then
      redis.call('ZADD', queue, -long, LONG)
    end
  end
  while true do
    local popped = pop(queue)
    local head = popped[1]
    if not head then
      return 0
    end
    if head == LONG then
      long = -tonumber(popped[2])
    else
      arrival = tonumber(popped[2])
      if head == caller then
        keep_long()
        return 2
      end
      if not now_us then
        now_us = now()
      end
      local now_ms = math.floor(now_us / 1000)
      if drop_marked and not deadline then
        deadline, marked = read_marker(handoff)
      end
      local cid, rest, token = split(head)
      if token and not (head == marked and now_ms > deadline) then
        -- First a probe the waiter ignores, to count the head client's
        -- subscribers on this server before the lock and fence are
        -- written. A client subscribed on a replica (after a failover,
        -- before its hub moved) still receives what the primary publishes
        -- but is not counted: granted, then passed over for the next in
        -- line, its attempt finds another's token and queues it again.
        local probed = redis.pcall('PUBLISH', prefix .. cid,
                                   string.match(rest, '^[^:]*') .. ':?')
        if type(probed) == 'table' then
          redis.call('ZADD', queue, arrival, head)
          keep_long()
          return 0
        end
        local received = 0
        if probed > 0 then
          local f = next_fence(fence, now_us, fence_ttl_ms)
          redis.call('SET', lock, token, 'PX', claim)
          local grant = string.format('%s:g%d:%d', rest, f, now_us + claim * 1000)
          received = redis.pcall('PUBLISH', prefix .. cid, grant)
          if type(received) == 'table' then
            redis.call('DEL', lock)
            redis.call('ZADD', queue, arrival, head)
            keep_long()
            return 0
          end
        end
        if received > 0 then
          if long and arrival <= long then
            -- Someone behind may park past this claim: the next seven stand
            -- by (up to seven frozen clients in a row cost a claim window).
            keep_long()
            local next = redis.call('ZRANGEBYSCORE', queue, 0, '+inf', 'LIMIT', 0, 7)
            for i, m in ipairs(next) do
              local cid2, rest2 = split(m)
              if rest2 then
                local window = claim + (i == 1 and STANDBY_SLACK_MS or 3 * STANDBY_SLACK_MS)
                if i == 1 then
                  local until_ms = now_ms + window + STANDBY_SLACK_MS
                  redis.call('SET', handoff, string.format('%d:%s', until_ms, m), 'PX',
                             window + 10 * STANDBY_SLACK_MS)
                end
                redis.pcall('PUBLISH', prefix .. cid2, rest2 .. ':s' .. window)
              end
            end
          end
          return 1
        end
      end
    end
  end
end
