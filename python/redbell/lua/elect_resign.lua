-- elect_resign: a leader steps down in the eyes of observers: the leader key
-- stops naming its token, and the election's channel says so. The lock
-- itself is released by the plain release script, after this one.
--
-- KEYS[1]  leader key  P:{N}:leader  hash: token, value, term, rev
-- ARGV[1]  version     the protocol version, "1" (protocol.lua)
-- ARGV[2]  token       the resigning leader's owner token
-- ARGV[3]  channel     P:{N}:leader:events
--
-- Publishes "resigned:<term>" on the channel.
--
-- Returns
--   1   the leader key named the token: cleared (its term kept, so readers
--       know that term ended) and published
--   0   it names another token or none (a newer leader, or resigned
--       already): nothing changes, nothing is published
--   error WRONGTYPE  the leader key is not a hash
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[2] then
  return 0
end
redis.call('HSET', KEYS[1], 'token', '')
-- pcall: a PUBLISH the ACL refuses must not fail the script after its write.
redis.pcall('PUBLISH', ARGV[3], 'resigned:' .. (redis.call('HGET', KEYS[1], 'term') or '0'))
return 1
