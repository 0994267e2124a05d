-- wake_next: shared code, prepended to release.lua, pass.lua and
-- break_lock.lua (not run alone).
--
-- wake_next(lock, waiters, prefix, handoff_ms, head) wakes the head of a
-- lock's waiter queue and reserves the free lock for it for a moment.
--   lock        the lock key P:{N}, free (or about to be overwritten): it is
--               set to the reservation "m:<member>@<end>" (end: when it
--               expires, in server ms) for handoff_ms, so
--               until the woken waiter's attempt arrives (or the
--               reservation expires) other attempts fail and queue instead
--               of barging in, and the wake-up is not wasted
--   waiters     the queue: a sorted set of members "<client id>:<waiter id>",
--               each scored by its expiry in server milliseconds
--   prefix      the wake channel prefix "P:{N}:wake:"; a member's client
--               listens on prefix .. client id, and the message is the waiter id
--   head        ZRANGE waiters 0 STANDBYS WITHSCORES, as the caller read it
--               (so a caller can learn that nobody waits from the same
--               command)
-- Members whose expiry has passed are dropped first: their client stopped
-- refreshing them (it crashed, froze, or was cut off). A member whose client
-- receives nothing (PUBLISH counted 0 receivers: the client is gone) is
-- dropped and the next one is tried. The woken member leaves the queue (its
-- attempt takes the reservation, or re-queues it if it came too late); a
-- receiver may be frozen with its socket open, so the next STANDBYS (7) in
-- line get a standby message "<waiter id>::s<window>": the n-th after the
-- woken one parks no longer than window = n times twice the reservation
-- (200 ms, 400 ms, ... 1.4 s), then attempts. So a frozen head, or up to
-- seven frozen clients in a row (a paused host's or container's workers,
-- clients cut off the network with their sockets open), costs the first
-- live waiter behind them its rank's window, not the holder's lease: 200 ms
-- behind one, 800 ms behind four, 1.4 s behind seven. The window grows with
-- the rank because the queue is ordered by expiry: an attempt that finds
-- the lock taken queues again behind everyone who queued since, so a
-- member whose window ended before the hand-offs reached it would lose its
-- place, again and again in a steady stream of holds; with n windows for n
-- places, that takes holds longer than a window (200 ms). A client queues
-- one waiter per lock at a time (acquire.rs, "One place per client"), so
-- the next seven are seven other clients however many tasks the woken
-- one's process has waiting. Of those, a member that already parks no
-- longer than a reservation (it queued during one: acquire.lua scores it
-- with the fraction .5) or that belongs to the woken member's client
-- (frozen with it, or alive and attempting; rare: a member whose pass-on
-- is on its way) gets no standby: it would change nothing. Nor does a
-- member that was
-- sent one already: a standby only ever shortens a park, so it attempts
-- within that first window anyway; the release marks it with the same
-- fraction .5 (its next attempt queues it again, unmarked). So in a steady
-- stream of hand-offs, where each releaser queues again during the
-- reservation its release made, a hand-off publishes one message (two
-- with more than STANDBYS waiting: the wake-up, and a standby to the
-- member that just came within reach). Nothing is published when nobody
-- waits.
-- PUBLISH runs under redis.pcall: a server whose ACL denies the wake channel
-- refuses it after the caller's DEL already happened (Redis does not roll a
-- script back), so a refusal must not fail the script. It stops the wake-up
-- instead: the queue is left as it is, and the waiters attempt at the end of
-- their bounded parks. (The client checks the channel rights at connect.)
-- Returns 1 if a waiter was woken (the lock key then holds its
-- reservation), 0 if nobody waits or PUBLISH was refused (the lock key is
-- left as it was).
-- How many members after the woken one get a standby: the longest run of
-- frozen clients at the head of a queue that costs a live waiter a window
-- of its rank rather than the holder's lease.
local STANDBYS = 7

local function wake_next(lock, waiters, prefix, handoff_ms, head)
  if #head == 0 then
    return 0
  end
  local t = redis.call('TIME')
  local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  while true do
    if #head > 0 and tonumber(head[2]) <= now_ms then
      -- Expired members sort first (the score is the expiry): prune them all.
      redis.call('ZREMRANGEBYSCORE', waiters, '-inf', now_ms)
      head = redis.call('ZRANGE', waiters, 0, STANDBYS, 'WITHSCORES')
    end
    local first = head[1]
    if not first then
      return 0
    end
    local sep = string.find(first, ':', 1, true)
    local received = 0
    if sep then
      received = redis.pcall('PUBLISH', prefix .. string.sub(first, 1, sep - 1),
                             string.sub(first, sep + 1))
      if type(received) == 'table' then
        return 0
      end
    end
    if received > 0 then
      redis.call('SET', lock, 'm:' .. first .. '@' .. (now_ms + tonumber(handoff_ms)),
                 'PX', handoff_ms)
      redis.call('ZREM', waiters, first)
      local client = string.sub(first, 1, sep)
      for i = 3, #head, 2 do
        local next = head[i]
        local s = string.find(next, ':', 1, true)
        -- No standby where it could not help: a member of the woken one's
        -- client (frozen with it, or alive and attempting), or one that
        -- queued during a reservation (score fraction .5: it parks no
        -- longer than a reservation anyway).
        if s and string.sub(next, 1, s) ~= client and tonumber(head[i + 1]) % 1 == 0 then
          local window = (i - 1) * tonumber(handoff_ms)  -- n × 2 × handoff_ms
          local told = redis.pcall('PUBLISH', prefix .. string.sub(next, 1, s - 1),
                                   string.sub(next, s + 1) .. '::s' .. window)
          if type(told) == 'number' and told > 0 then
            -- It attempts within the window now, whatever later standbys
            -- say (a standby only ever shortens a park): the fraction .5
            -- tells the next releases so, until its next attempt queues
            -- it again. Under pcall, like the PUBLISHes: the wake-up is
            -- written, and a refused mark only costs a repeated standby.
            redis.pcall('ZADD', waiters, string.format('%d.5', tonumber(head[i + 1])), next)
          end
        end
      end
      return 1
    end
    redis.call('ZREM', waiters, first)
    head = redis.call('ZRANGE', waiters, 0, STANDBYS, 'WITHSCORES')
  end
end
