-- fair_common: shared code, prepended to the fair_* scripts (not run alone).
--
-- The fair lock's queue is two sorted sets over the same members
-- "<client id>:<waiter id>:<token>":
--   queue   member -> arrival (server time in us): FIFO order
--   expiry  member -> expiry (server time in ms): a waiter that stops
--           refreshing its entry (it crashed) leaves the queue by itself
--
-- now() -> now_us, now_ms from the server clock.
-- prune(queue, expiry, now_ms) drops expired members from both sets.
-- next_fence(fence, now_us, ttl_ms) advances the fencing counter to
--   max(previous + 1, now_us) and returns it.
-- grant_next(lock, fence, queue, expiry, granted, prefix, claim_ms,
--            fence_ttl_ms, now_us, caller)
--   moves the queue on while the lock is free. Returns 2 at once if the head
--   is `caller` (the caller may take the lock itself), 0 if nobody waits.
--   Otherwise it makes the lock the head waiter's: its token, a fresh fence,
--   a claim lease of claim_ms, and publishes "<waiter id>:<token>" on its
--   client's channel prefix .. client id. The next two in line get a standby
--   message "<waiter id>:<token>:s<window>": park no longer than `window` ms
--   (the claim plus STANDBY_SLACK_MS for the second, plus three times that
--   for the third), then attempt. The granted member's expiry is cut to the
--   end of its claim and the second's to a little after its window, so a
--   receiver that is frozen with its socket open (PUBLISH counts it) is
--   pruned by the next attempt: one frozen head, or two in a row, delay the
--   first live waiter by about a claim, not a lease.
--   Returns 1 then. The granted member stays queued until it confirms and is
--   remembered in `granted`. A head whose client receives nothing (PUBLISH
--   counted 0 receivers), or whose earlier grant lapsed unconfirmed, is
--   dropped and the next one is tried. A PUBLISH the server refuses (its ACL
--   denies the channel; run under redis.pcall, so the caller's writes stand)
--   takes the grant back and returns 0: the waiters attempt at the end of
--   their bounded parks.
local STANDBY_SLACK_MS = 100
local function now()
  local t = redis.call('TIME')
  local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
  return us, math.floor(us / 1000)
end

local function prune(queue, expiry, now_ms)
  local gone = redis.call('ZRANGEBYSCORE', expiry, '-inf', now_ms)
  for _, m in ipairs(gone) do
    redis.call('ZREM', queue, m)
    redis.call('ZREM', expiry, m)
  end
end

local function next_fence(fence, now_us, ttl_ms)
  local f = math.max((tonumber(redis.call('GET', fence)) or 0) + 1, now_us)
  redis.call('SET', fence, string.format('%d', f), 'PX', ttl_ms)
  return f
end

local function split(member)
  local cid, rest = string.match(member, '^([^:]+):(.*)$')
  local token = rest and string.match(rest, '^[^:]*:(.*)$')
  return cid, rest, token
end

local function grant_next(lock, fence, queue, expiry, granted, prefix, claim_ms,
                          fence_ttl_ms, now_us, caller)
  while true do
    local head = redis.call('ZRANGE', queue, 0, 0)[1]
    if not head then
      return 0
    end
    if head == caller then
      return 2
    end
    local cid, rest, token = split(head)
    if token and redis.call('GET', granted) ~= head then
      next_fence(fence, now_us, fence_ttl_ms)
      redis.call('SET', lock, token, 'PX', claim_ms)
      local received = redis.pcall('PUBLISH', prefix .. cid, rest)
      if type(received) == 'table' then
        redis.call('DEL', lock)
        return 0
      end
      if received > 0 then
        redis.call('SET', granted, head, 'PX', claim_ms * 4)
        -- The receiver may be frozen with its socket open: unless it
        -- confirms within the claim, its entry lapses with the claim. The
        -- next two in line stand by (see the header), and the second's
        -- entry lapses soon after its standby ends unless it attempts.
        local now_ms = math.floor(now_us / 1000)
        local claim = tonumber(claim_ms)
        redis.call('ZADD', expiry, 'XX', now_ms + claim, head)
        local next = redis.call('ZRANGE', queue, 1, 2)
        for i, m in ipairs(next) do
          local cid2, rest2 = split(m)
          if rest2 then
            local window = claim + (i == 1 and STANDBY_SLACK_MS or 3 * STANDBY_SLACK_MS)
            if i == 1 then
              redis.call('ZADD', expiry, 'XX', now_ms + window + STANDBY_SLACK_MS, m)
            end
            redis.pcall('PUBLISH', prefix .. cid2, rest2 .. ':s' .. window)
          end
        end
        return 1
      end
      redis.call('DEL', lock)
    end
    redis.call('ZREM', queue, head)
    redis.call('ZREM', expiry, head)
  end
end
