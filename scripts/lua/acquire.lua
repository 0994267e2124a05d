-- acquire: take the lock if it is free, and advance its fencing counter.
--
-- KEYS[1]  lock key      P:{N}          (string: the owner's token, PX = lease)
-- KEYS[2]  fence key     P:{N}:fence    (string: integer fencing counter)
-- ARGV[1]  token         this acquisition's random owner token
-- ARGV[2]  lease_ms      lease in milliseconds (> 0)
-- ARGV[3]  fence_ttl_ms  expiry of the fence key in milliseconds (> 0)
--
-- Returns
--   {1, fence}  the key was set; fence = max(previous + 1, server TIME in us)
--   {0, pttl}   someone holds the lock; pttl = its remaining ms (-1: no expiry)
--   error WRONGTYPE  the lock key exists but is not a string
--
-- The fence key is read before anything is written, so a fence key of the
-- wrong type fails the script without leaving a lock key behind.
local prev = tonumber(redis.call('GET', KEYS[2])) or 0
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local now = redis.call('TIME')
  local fence = math.max(prev + 1, tonumber(now[1]) * 1000000 + tonumber(now[2]))
  redis.call('SET', KEYS[2], string.format('%d', fence), 'PX', ARGV[3])
  return {1, fence}
end
if redis.call('TYPE', KEYS[1]).ok ~= 'string' then
  return redis.error_reply('WRONGTYPE lock key holds a value that is not a redbell token')
end
return {0, redis.call('PTTL', KEYS[1])}
