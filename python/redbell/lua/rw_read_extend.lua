-- rw_read_extend: reset the lease of reader holds we still own; one call
-- renews many (the renewal task batches them).
--
-- KEYS[1..n]   readers sets  P:{N}:readers
-- ARGV[1]      version       the protocol version, "1" (protocol.lua)
-- ARGV[2]      lease_ms      the new lease in milliseconds, from now (> 0)
-- ARGV[3..n+2] tokens        ARGV[i+2] is the reader token in KEYS[i]
--
-- Returns an array with one code per key, in KEYS order:
--   1   the hold was live; its expiry is now lease_ms from now
--  -1   the hold is gone (expired or removed)
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}
for i, key in ipairs(KEYS) do
  local expiry = redis.call('ZSCORE', key, ARGV[i + 2])
  if expiry and tonumber(expiry) > now_ms then
    redis.call('ZADD', key, 'XX', now_ms + tonumber(ARGV[2]), ARGV[i + 2])
    if redis.call('PTTL', key) < tonumber(ARGV[2]) then
      redis.call('PEXPIRE', key, ARGV[2])
    end
    out[i] = 1
  else
    out[i] = -1
  end
end
return out
