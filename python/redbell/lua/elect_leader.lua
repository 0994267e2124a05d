-- elect_leader: who leads an election, read in one atomic step. Read-only.
-- The leader is the holder of the election's lock key, once it has
-- proclaimed itself in the leader key (elect_proclaim); a holder whose
-- token the leader key does not name (elected a moment ago and not yet
-- proclaimed, or resigned) is no leader yet.
--
-- KEYS[1]  lock key    P:{N}         string: the leader's owner token, PX = lease
-- KEYS[2]  leader key  P:{N}:leader  hash: token, value, term, rev
-- ARGV[1]  version  the protocol version, "1" (protocol.lua)
--
-- Returns
--   {1, term, rev, pttl, value}  the leader: its term (the fence of its
--                                acquisition, as a string), the revision of
--                                its value (1 when elected, +1 per
--                                proclamation, a string), the remaining ms
--                                of its lease (-1: no expiry), its value
--   {0, pttl, term}              no leader: pttl of the lock key (-2: free,
--                                -1: no expiry), and the term the leader
--                                key last named ("0" if none): every term
--                                up to it has ended
--   error WRONGTYPE  the lock key is not a string or the leader key not a hash
local holder = redis.call('GET', KEYS[1])
local pttl = redis.call('PTTL', KEYS[1])
local f = redis.call('HMGET', KEYS[2], 'token', 'value', 'term', 'rev')
if holder and f[1] == holder then
  return {1, f[3] or '0', f[4] or '1', pttl, f[2] or ''}
end
return {0, pttl, f[3] or '0'}
