-- extend: reset the lease of locks we still own. One call renews many
-- locks at once (the renewal task batches every lease that falls due
-- together); a single extend passes one key.
--
-- KEYS[1..n]  lock keys     P:{N}
-- ARGV[1]     version       the protocol version, "1" (protocol.lua)
-- ARGV[2]     lease_ms      the new lease in milliseconds, counted from now (> 0)
-- ARGV[3..n+2] tokens       ARGV[i+2] is the owner token expected in KEYS[i]
--
-- Returns an array with one code per key, in KEYS order:
--   1   the key was ours; its expiry is now lease_ms from now
--   0   the key is held by another token (left untouched)
--  -1   the key is gone (the lease expired or it was deleted), or holds
--       foreign data of another type (so one such key cannot fail the
--       renewal of the others in the batch)
local out = {}
for i, key in ipairs(KEYS) do
  local v = redis.pcall('GET', key)
  if type(v) == 'table' then
    v = false
  end
  if v == ARGV[i + 2] then
    redis.call('PEXPIRE', key, ARGV[2])
    out[i] = 1
  elseif v then
    out[i] = 0
  else
    out[i] = -1
  end
end
return out
