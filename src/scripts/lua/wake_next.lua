-- wake_next: shared code, prepended to release.lua and pass.lua (not run alone).
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
-- A member whose client receives nothing (PUBLISH counted 0 receivers: the
-- client is gone) is dropped and the next one is tried. Nothing is published
-- when nobody waits. Expired members need no pruning here: a live client
-- removes its own members (on acquiring, or by passing on when a waiter
-- leaves), a gone client's members meet 0 receivers, and the queue key
-- itself expires with its longest-lived member.
-- Returns 1 if a waiter was woken, 0 if nobody waits.
local function wake_next(waiters, prefix, handoff, handoff_ms)
  while true do
    local head = redis.call('ZRANGE', waiters, 0, 0)[1]
    if not head then
      return 0
    end
    local sep = string.find(head, ':', 1, true)
    if sep and redis.call('PUBLISH', prefix .. string.sub(head, 1, sep - 1),
                          string.sub(head, sep + 1)) > 0 then
      redis.call('SET', handoff, head, 'PX', handoff_ms)
      return 1
    end
    redis.call('ZREM', waiters, head)
  end
end
