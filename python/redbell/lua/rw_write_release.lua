-- rw_write_release: drop the write hold if it is still ours and wake the
-- lock's waiters (readers, and a writer).
--
-- KEYS[1]  writer   P:{N}
-- KEYS[2]  channel  P:{N}:rw
-- KEYS[3]  intents  P:{N}:writers   sorted set: waiting writer -> expiry ms
-- ARGV[1]  version  the protocol version, "1" (protocol.lua)
-- ARGV[2]  token    the writer's owner token
-- ARGV[3]  window_ms  how long a woken writer's intent lasts unless it
--                     attempts (renewing it)
--
-- Returns
--   1   ours: deleted, "w" published, and the intents cut to the window
--   0   held by another token
--  -1   gone (the lease expired)
-- The writers that wait were just woken by this release: a live one
-- attempts at once (and so refreshes its intent); one that is frozen or cut
-- off does not, and its intent must not hold new readers back for longer
-- than window_ms (before, it did until its entry expired: about a lease).
local function cut_intents(intents, now_ms, window_ms)
  local until_ms = now_ms + tonumber(window_ms)
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', intents, '(' .. until_ms, '+inf')) do
    redis.call('ZADD', intents, 'XX', until_ms, m)
  end
end
local v = redis.call('GET', KEYS[1])
if v ~= ARGV[2] then
  if v then
    return 0
  end
  return -1
end
redis.call('DEL', KEYS[1])
local t = redis.call('TIME')
cut_intents(KEYS[3], tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), ARGV[3])
-- pcall: a PUBLISH the ACL refuses must not fail the script after its writes.
redis.pcall('PUBLISH', KEYS[2], 'w')
return 1
