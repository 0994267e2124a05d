-- elect_proclaim: set what observers of an election see, if the caller
-- still leads, and tell them on the election's channel. Run once right
-- after the campaign's acquire ("elected"), then by each proclamation.
--
-- KEYS[1]  lock key    P:{N}         string: the leader's owner token
-- KEYS[2]  leader key  P:{N}:leader  hash: token, value, term, rev
-- ARGV[1]  version     the protocol version, "1" (protocol.lua)
-- ARGV[2]  token       the leader's owner token
-- ARGV[3]  term        the leader's term (the fence of its acquisition)
-- ARGV[4]  value       the value observers are to see
-- ARGV[5]  event       "elected" (takes the leader key over) or "proclaimed"
--                      (only while the leader key still names the token)
-- ARGV[6]  channel     P:{N}:leader:events
-- ARGV[7]  ttl_ms      expiry of the leader key (the fence key's, > 0)
--
-- Publishes "<event>:<term>:<rev>:<pttl>:<value>" on the channel, pttl being
-- the remaining ms of the leader's lease.
--
-- Returns
--   {1, rev}  set and published; rev = the value's revision (1 when elected,
--             +1 per proclamation). An "elected" re-sent after its first
--             run (its reply lost) finds the key its own: {1, rev}, and
--             nothing changes.
--   {0, 0}    not the leader: the lock key holds another token or is gone
--             (the lease expired), or, for "proclaimed", the leader key no
--             longer names the token (resigned); nothing is written
--   error WRONGTYPE  the lock key is not a string or the leader key not a hash
if redis.call('GET', KEYS[1]) ~= ARGV[2] then
  return {0, 0}
end
local mine = redis.call('HGET', KEYS[2], 'token') == ARGV[2]
local rev
if ARGV[5] == 'elected' then
  if mine then
    return {1, tonumber(redis.call('HGET', KEYS[2], 'rev')) or 1}
  end
  rev = 1
  redis.call('HSET', KEYS[2], 'token', ARGV[2], 'value', ARGV[4], 'term', ARGV[3], 'rev', rev)
else
  if not mine then
    return {0, 0}
  end
  rev = redis.call('HINCRBY', KEYS[2], 'rev', 1)
  redis.call('HSET', KEYS[2], 'value', ARGV[4])
end
redis.call('PEXPIRE', KEYS[2], ARGV[7])
local pttl = redis.call('PTTL', KEYS[1])
-- pcall: a PUBLISH the ACL refuses must not fail the script after its
-- writes (observers then learn on their next read).
redis.pcall('PUBLISH', ARGV[6],
            ARGV[5] .. ':' .. ARGV[3] .. ':' .. rev .. ':' .. pttl .. ':' .. ARGV[4])
return {1, rev}
