-- wake_next: shared code, prepended to release.lua, pass.lua and
-- force_release.lua (not run alone).
--
-- wake_next(waiters, prefix, handoff, handoff_ms) wakes the head of a lock's
-- waiter queue and reserves the free lock for it for a moment.
--   waiters     the queue: a sorted set of members "<client id>:<waiter id>",
--               each scored by its expiry in server milliseconds
--   prefix      the wake channel prefix "P:{N}:wake:"; a member's client
--               listens on prefix .. client id, and the message is the waiter id
--   handoff     the hand-off key P:{N}:handoff, set to the woken member for
--               handoff_ms: until the woken waiter's attempt arrives (or the
--               key expires) other attempts fail and queue instead of barging
--               in, so the wake-up is not wasted
-- Members whose expiry has passed are dropped first: their client stopped
-- refreshing them (it crashed, froze, or was cut off). A member whose client
-- receives nothing (PUBLISH counted 0 receivers: the client is gone) is
-- dropped and the next one is tried. A receiver may still be frozen with its
-- socket open, so the woken member's expiry is cut to the end of the
-- reservation (its attempt, if it is alive, re-queues or removes it), and the
-- next two in line get a standby message "<waiter id>::s<window>": they
-- park no longer than window = twice the reservation, then attempt, so a frozen head (or two frozen
-- in a row) costs the others one reservation, not a lease. Nothing is
-- published when nobody waits.
-- PUBLISH runs under redis.pcall: a server whose ACL denies the wake channel
-- refuses it after the caller's DEL already happened (Redis does not roll a
-- script back), so a refusal must not fail the script. It stops the wake-up
-- instead: the queue is left as it is, and the waiters attempt at the end of
-- their bounded parks. (The client checks the channel rights at connect.)
-- Returns 1 if a waiter was woken, 0 if nobody waits (or PUBLISH was refused).
local function wake_next(waiters, prefix, handoff, handoff_ms)
  local t = redis.call('TIME')
  local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('ZREMRANGEBYSCORE', waiters, '-inf', now_ms)
  while true do
    local head = redis.call('ZRANGE', waiters, 0, 0)[1]
    if not head then
      return 0
    end
    local sep = string.find(head, ':', 1, true)
    local received = 0
    if sep then
      received = redis.pcall('PUBLISH', prefix .. string.sub(head, 1, sep - 1),
                             string.sub(head, sep + 1))
      if type(received) == 'table' then
        return 0
      end
    end
    if received > 0 then
      redis.call('SET', handoff, head, 'PX', handoff_ms)
      redis.call('ZADD', waiters, 'XX', now_ms + tonumber(handoff_ms), head)
      for _, next in ipairs(redis.call('ZRANGE', waiters, 1, 2)) do
        local s = string.find(next, ':', 1, true)
        if s then
          redis.pcall('PUBLISH', prefix .. string.sub(next, 1, s - 1),
                      string.sub(next, s + 1) .. '::s' .. (2 * tonumber(handoff_ms)))
        end
      end
      return 1
    end
    redis.call('ZREM', waiters, head)
  end
end
