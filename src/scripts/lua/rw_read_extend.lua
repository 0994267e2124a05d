-- rw_read_extend: reset the lease of reader holds we still own; one call
-- renews many (the renewal task batches them).
--
-- KEYS[1..n]   readers sets  P:{N}:readers
-- ARGV[1]      version       the protocol version, "1" (protocol.lua)
-- ARGV[2]      lease_ms      the new lease in milliseconds, from now (> 0)
-- ARGV[3], ARGV[5], ..  token    the reader token in KEYS[i]: ARGV[2i+1]
-- ARGV[4], ARGV[6], ..  channel  the RwLock's channel P:{N}:rw of KEYS[i]:
--                                ARGV[2i+2]
--
-- A hold whose expiry moves in (a shorter lease) publishes "s" on the
-- channel: a waiting writer parked on the old expiry of the last reader,
-- and a shorter one that lapses would wake nobody; told, it attempts and
-- parks again on the new expiry.
--
-- Returns an array with one code per key, in KEYS order:
--   1   the hold was live; its expiry is now lease_ms from now
--  -1   the hold is gone (expired or removed)
local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[2])
local out = {}
for i, key in ipairs(KEYS) do
  local expiry = redis.call('ZSCORE', key, ARGV[2 * i + 1])
  if expiry and tonumber(expiry) > now_ms then
    redis.call('ZADD', key, 'XX', now_ms + lease, ARGV[2 * i + 1])
    if redis.call('PTTL', key) < lease then
      redis.call('PEXPIRE', key, lease)
    end
    if now_ms + lease < tonumber(expiry) then
      redis.pcall('PUBLISH', ARGV[2 * i + 2], 's')
    end
    out[i] = 1
  else
    out[i] = -1
  end
end
return out
