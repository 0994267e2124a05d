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
--   client's channel prefix .. client id; the next in line gets a standby
--   message "<waiter id>:<token>:s" so it parks no longer than the claim.
--   Returns 1 then. The granted member stays queued until it confirms and is
--   remembered in `granted`. A head whose client receives nothing (PUBLISH
--   counted 0 receivers), or whose earlier grant lapsed unconfirmed, is
--   dropped and the next one is tried.
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
      if redis.call('PUBLISH', prefix .. cid, rest) > 0 then
        redis.call('SET', granted, head, 'PX', claim_ms * 4)
        local second = redis.call('ZRANGE', queue, 1, 1)[1]
        if second then
          local cid2, rest2 = split(second)
          if rest2 then
            redis.call('PUBLISH', prefix .. cid2, rest2 .. ':s')
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
