-- sem_extend: reset the lease of semaphore permits we still hold; one call
-- renews many (the renewal task batches them). Each permit takes two keys.
-- (sem_common.lua is prepended.)
--
-- KEYS[1], KEYS[3], ..  holders  P:{N}:holders  sorted set: token -> expiry (server ms);
--                                 KEYS[2i-1] for permit i
-- KEYS[2], KEYS[4], ..  count    P:{N}:permits  string, kept alive as long as the
--                                 holders; KEYS[2i] for permit i
-- ARGV[1]      version   the protocol version, "1" (protocol.lua)
-- ARGV[2]      lease_ms  the new lease in milliseconds, from now (> 0)
-- ARGV[i+2]    token     the permit token in KEYS[2i-1]
--
-- Returns an array with one code per permit (i = 1..#KEYS/2), in order:
--   1   the permit was live; its expiry is now lease_ms from now
--  -1   the permit is gone (expired or reclaimed), or a key holds foreign
--       data (so one such key cannot fail the renewal of the others)
local _, now_ms = now()
local lease = tonumber(ARGV[2])
local out = {}
for i = 1, #KEYS / 2 do
  local holders, count = KEYS[2 * i - 1], KEYS[2 * i]
  local expiry = redis.pcall('ZSCORE', holders, ARGV[i + 2])
  if type(expiry) == 'table' then
    expiry = false
  end
  if expiry and tonumber(expiry) > now_ms then
    redis.call('ZADD', holders, 'XX', now_ms + lease, ARGV[i + 2])
    for _, key in ipairs({holders, count}) do
      -- (a no-op on a count that is gone)
      keep_key(key, lease + HOLDERS_GRACE_MS)
    end
    out[i] = 1
  else
    out[i] = -1
  end
end
return out
