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
-- grant_next(lock, fence, queue, expiry, prefix, claim_ms, fence_ttl_ms, now_us)
--   makes the lock the head waiter's: its token, a fresh fence, a claim
--   lease of claim_ms, and publishes "<waiter id>:<token>" on its client's
--   channel prefix .. client id. A head whose client receives nothing
--   (PUBLISH counted 0 receivers) is dropped and the next one is tried.
--   The granted member stays queued until its confirming acquire.
--   Returns 1 if a waiter was granted the lock, 0 if nobody waits.
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

local function grant_next(lock, fence, queue, expiry, prefix, claim_ms, fence_ttl_ms, now_us)
  while true do
    local head = redis.call('ZRANGE', queue, 0, 0)[1]
    if not head then
      return 0
    end
    local cid, rest = string.match(head, '^([^:]+):(.*)$')
    local token = rest and string.match(rest, ':(.*)$')
    if token then
      next_fence(fence, now_us, fence_ttl_ms)
      redis.call('SET', lock, token, 'PX', claim_ms)
      if redis.call('PUBLISH', prefix .. cid, rest) > 0 then
        return 1
      end
      redis.call('DEL', lock)
    end
    redis.call('ZREM', queue, head)
    redis.call('ZREM', expiry, head)
  end
end
