-- extend: reset the lease of locks we still own. One call renews many
-- locks at once (the renewal task batches every lease that falls due
-- together); a single extend passes one key.
--
-- KEYS[1..n]  lock keys     P:{N}
-- ARGV[1]     version       the protocol version, "1" (protocol.lua)
-- ARGV[2]     lease_ms      the new lease in milliseconds, counted from now (> 0)
-- ARGV[3..n+2] tokens       ARGV[i+2] is the owner token expected in KEYS[i]
--
-- A lease shortened while others wait. A Mutex's (or Election's) waiters
-- park on the PTTL they were told when they queued; a shorter lease that
-- then lapses (its holder dead) frees the lock with no message, and they
-- would sleep on the old PTTL. So an extend that moves a Mutex key's
-- expiry in (PEXPIRE ... LT took effect: the key had a later expiry, or
-- none) sends the first three live members of P:{N}:waiters a standby
-- "<waiter id>::s<lease_ms>": they park no longer than the new lease, then
-- attempt (and re-park on its PTTL if it was renewed). Three, as in
-- wake_next.lua: one place per client per lock, so three processes, and a
-- frozen one or two cannot hold up the others. The queue and the wake
-- channels P:{N}:wake:<client id> share the key's hash tag, so its slot.
-- A renewal (the usual extend: a later expiry) costs one PEXPIRE ... GT.
-- The FairMutex's and RwLock writer's queues are not told (their waiters'
-- parks are bounded by their own grants and windows).
--
-- Returns an array with one code per key, in KEYS order:
--   1   the key was ours; its expiry is now lease_ms from now
--   0   the key is held by another token (left untouched)
--  -1   the key is gone (the lease expired or it was deleted), or holds
--       foreign data of another type (so one such key cannot fail the
--       renewal of the others in the batch)
local now_ms

-- Tells the first three live waiters of the Mutex key `key` to park no
-- longer than `lease` ms. PUBLISH and the read under pcall: a refused
-- channel or foreign data at the queue must not fail the renewal.
local function standby(key, lease)
  if not now_ms then
    local t = redis.call('TIME')
    now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  local head = redis.pcall('ZRANGEBYSCORE', key .. ':waiters', '(' .. now_ms, '+inf',
                           'LIMIT', 0, 3)
  if type(head) ~= 'table' or head.err then
    return
  end
  for _, m in ipairs(head) do
    local s = string.find(m, ':', 1, true)
    if s then
      redis.pcall('PUBLISH', key .. ':wake:' .. string.sub(m, 1, s - 1),
                  string.sub(m, s + 1) .. '::s' .. lease)
    end
  end
end

local out = {}
for i, key in ipairs(KEYS) do
  local v = redis.pcall('GET', key)
  if type(v) == 'table' then
    v = false
  end
  if v == ARGV[i + 2] then
    -- GT: a later expiry (a renewal) is set at once. Else the new one is
    -- no later: LT sets it if it is earlier (or the key had none), and
    -- then the lease was shortened.
    if redis.call('PEXPIRE', key, ARGV[2], 'GT') == 0 then
      if redis.call('PEXPIRE', key, ARGV[2], 'LT') == 1
        and string.find('ml', string.sub(v, 1, 1), 1, true) then
        standby(key, ARGV[2])
      end
    end
    out[i] = 1
  elseif v then
    out[i] = 0
  else
    out[i] = -1
  end
end
return out
