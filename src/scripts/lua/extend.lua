-- extend: reset the lease of locks we still own. One call renews many
-- locks at once (the renewal task batches every lease that falls due
-- together); a single extend passes one lock. Each lock takes two keys
-- and two arguments.
--
-- KEYS[1], KEYS[3], ..  lock key   P:{N}; KEYS[2i-1] for lock i
-- KEYS[2], KEYS[4], ..  its queue  P:{N}:waiters (Mutex, Election), P:{N}:fifo
--                                  (FairMutex), P:{N}:writers (RwLock writer;
--                                  not read); KEYS[2i] for lock i
-- ARGV[1]               version    the protocol version, "1" (protocol.lua)
-- ARGV[2]               lease_ms   the new lease in milliseconds, from now (> 0)
-- ARGV[3], ARGV[5], ..  token      the owner token expected in KEYS[2i-1]:
--                                  ARGV[2i+1] for lock i
-- ARGV[4], ARGV[6], ..  channel    the wake prefix P:{N}:wake: (Mutex,
--                                  Election, FairMutex; a client's channel is
--                                  prefix .. id), or the RwLock's channel
--                                  P:{N}:rw (writer): ARGV[2i+2] for lock i
--
-- A lease shortened while others wait. The waiters park on the PTTL they
-- were told; a shorter lease that then lapses (its holder dead) frees the
-- lock with no message, and they would sleep on the old PTTL. So an extend
-- that moves the key's expiry in (PEXPIRE ... LT took effect: the key had a
-- later expiry, or none) tells them to park no longer than the new lease,
-- then attempt (and re-park on its PTTL if it was renewed), by the token's
-- kind letter:
--   m, l  the first three live members "C:W" of the queue get a standby
--         "W::s<lease_ms>" on prefix .. C. Three, as in wake_next.lua: one
--         place per client per lock, so three processes, and a frozen one
--         or two cannot hold up the others.
--   q     the first three waiters "C:W:T" by arrival (not the long-park
--         marker, scored below 0) get a fair standby "W:T:s<lease_ms>".
--   w     "s" on the RwLock's channel: every client's waiters attempt.
-- A renewal (the usual extend: a later expiry) costs one PEXPIRE ... GT.
-- Every key and channel shares the lock's hash tag, so its slot.
--
-- Returns an array with one code per lock, in order:
--   1   the key was ours; its expiry is now lease_ms from now
--   0   the key is held by another token (left untouched)
--  -1   the key is gone (the lease expired or it was deleted), or holds
--       foreign data of another type (so one such key cannot fail the
--       renewal of the others in the batch)
local now_ms

-- Tells the waiters of a lock whose token `v` now expires in `lease` ms.
-- PUBLISH and the reads under pcall: a refused channel or foreign data at
-- the queue must not fail the renewal.
local function standby(v, queue, channel, lease)
  local letter = string.sub(v, 1, 1)
  if letter == 'w' then
    redis.pcall('PUBLISH', channel, 's')
    return
  end
  if not now_ms then
    local t = redis.call('TIME')
    now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  local head
  if letter == 'q' then
    head = redis.pcall('ZRANGEBYSCORE', queue, 0, '+inf', 'LIMIT', 0, 3)
  elseif letter == 'm' or letter == 'l' then
    head = redis.pcall('ZRANGEBYSCORE', queue, '(' .. now_ms, '+inf', 'LIMIT', 0, 3)
  end
  if type(head) ~= 'table' or head.err then
    return
  end
  for _, m in ipairs(head) do
    local cid, rest = string.match(m, '^([^:]+):(.*)$')
    if cid then
      -- m, l: rest is the waiter id; q: "<waiter id>:<token>".
      local tail = letter == 'q' and ':s' or '::s'
      redis.pcall('PUBLISH', channel .. cid, rest .. tail .. lease)
    end
  end
end

local out = {}
for i = 1, #KEYS / 2 do
  local key = KEYS[2 * i - 1]
  local token = ARGV[2 * i + 1]
  local v = redis.pcall('GET', key)
  if type(v) == 'table' then
    v = false
  end
  if v == token then
    -- GT: a later expiry (a renewal) is set at once. Else the new one is
    -- no later: LT sets it if it is earlier (or the key had none), and
    -- then the lease was shortened.
    if redis.call('PEXPIRE', key, ARGV[2], 'GT') == 0
      and redis.call('PEXPIRE', key, ARGV[2], 'LT') == 1 then
      standby(v, KEYS[2 * i], ARGV[2 * i + 2], ARGV[2])
    end
    out[i] = 1
  elseif v then
    out[i] = 0
  else
    out[i] = -1
  end
end
return out
